"""A light stand-in for the training workload, for load tests only: no JAX, no model, a few kB per checkpoint.

It takes the real workload's flags and identity (same `key=value` flags, `jax-init-info.txt`, exit codes), steps at
`step_time_ms` per step, prints `completed step: N` (what the local runner's fault injection watches), writes the
same events, and writes checkpoints in Orbax's on-disk layout so the sensors, the listing and the launch
operator's decisions see what they see with the real workload:

- persistent tier, by the processes of slice 0 (replica 0): `<base>/<run>/checkpoints/<step>.orbax-checkpoint-tmp/`
  with the item folder and `_CHECKPOINT_METADATA`, renamed to `<step>/`, then `<step>/commit_success.txt`;
- local tier (emergency mode), by the other slices: `<local_checkpoint_directory>/<step>/`, the newest kept.
- multi-tier mode (`enable_multi_tier_checkpointing=True`), as MaxText's: every process saves only its local tier
  every `local_checkpoint_period` steps and the last step, never a persistent checkpoint; the local runner's
  replicator (`mtc_local.runner.replicator`) backs the ramdisks up to the bucket and, at a new start of the pods,
  restores them, so the process resumes from the newest step in its own ramdisk and logs
  `restored step N from tier local`.

The processes of one start agree through a shared folder (`mtc_local.workload.sync_folder`), as the JAX
workload's do through their coordinator, and keep only what a TPU keeps (`mtc_local.workload.agreement`):

- a start restores the newest step some slice holds whole in its ramdisks (emergency mode: every process posts
  its local steps and waits for the others, as `jax.distributed.initialize` does) unless the newest finalized
  persistent step is newer; it logs MaxText's `restoring from this run's directory step N`, then
  `restored step N from tier T`;
- a SIGTERM is a notice to the whole job (JAX's preemption sync): every process joins after its next step, they
  save the newest step reached (with `enable_autocheckpoint`) and exit 0 (MaxText's preemption exit). When one
  process cannot take part (a lost host: the survivors of a JobSet restart; a hung one; a notice that never reached
  a host before its grace period ended), nobody saves and the others exit 42. A process that was stopped (a hang)
  and is resumed by its deletion's SIGCONT saves nothing and exits 143.

The final "parameters" are a hash of the seed and the final step, so a faulted run ends with
the same `params_sha256` as a fault-free one exactly when it reached the same step.

    python -m mtc_local.light_workload run_name=r base_output_directory=/tmp/b steps=100 step_time_ms=50
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from mtc_provider.core.measure.listing import COMMIT_FILE
from mtc_provider.core.basics.vocabulary import ENV_JOBSET_NAME
from mtc_local.workload import (
    EXIT_OK,
    EXIT_RETRYABLE,
    Config,
    Identity,
    configure,
    local_save_due,
    persistent_save_due,
)
from mtc_local.workload.agreement import LOCAL, hung, newest_complete_local_step, preemption_step, restore_choice
from mtc_local.workload.sync_folder import SyncFolder
from mtc_provider.adapters.workload_events import append_event, events_path

LIGHT_WORKLOAD_COMMAND = ("python", "-m", "mtc_local.light_workload")
TMP_SUFFIX = ".orbax-checkpoint-tmp"
METADATA_FILE = "_CHECKPOINT_METADATA"
EXIT_TERMINATED = 128 + signal.SIGTERM  # how Kubernetes reports a container ended by SIGTERM's default action


def finalized_steps(checkpoint_dir: Path) -> list[int]:
    """Persistent steps with their commit file (what Orbax and the provider's listing count as finalized)."""
    if not checkpoint_dir.is_dir():
        return []
    return sorted(int(d.name) for d in checkpoint_dir.iterdir()
                  if d.name.isdigit() and (d / COMMIT_FILE).exists())


def write_persistent(checkpoint_dir: Path, step: int, item: str, payload: bytes) -> None:
    """Orbax's sequence: everything into `<step>.orbax-checkpoint-tmp`, rename to `<step>`, then the commit file.
    The hosts of slice 0 save the same step together (a preemption sync's agreed step); Orbax's primary host alone
    finalizes it, so here one at a time does, under a lock beside the checkpoint directory, and the others find it
    committed."""
    locks = checkpoint_dir.parent / ".save-locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"persistent-{step}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        _write_persistent(checkpoint_dir, step, item, payload)


def _write_persistent(checkpoint_dir: Path, step: int, item: str, payload: bytes) -> None:
    final = checkpoint_dir / str(step)
    if (final / COMMIT_FILE).exists():
        return
    tmp = checkpoint_dir / f"{step}{TMP_SUFFIX}"
    shutil.rmtree(tmp, ignore_errors=True)
    init_ns = time.time_ns()
    (tmp / item).mkdir(parents=True)
    (tmp / item / "state").write_bytes(payload)
    shutil.rmtree(final, ignore_errors=True)  # a step renamed but never committed (killed in between)
    (tmp / METADATA_FILE).write_text(json.dumps({"init_timestamp_nsecs": init_ns,
                                                 "commit_timestamp_nsecs": time.time_ns()}))
    os.replace(tmp, final)
    (final / COMMIT_FILE).write_text(f"Checkpoint commit was successful to {final}")


def write_local(local_dir: Path, step: int, payload: bytes, keep: int) -> None:
    """Into `<step>.tmp` then renamed to `<step>/`: a step folder is always whole (the replicator copies it)."""
    target = local_dir / str(step)
    if target.is_dir():
        return
    tmp = local_dir / f"{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "state").write_bytes(payload)
    os.replace(tmp, target)
    steps = sorted(int(d.name) for d in local_dir.iterdir() if d.name.isdigit())
    for old in steps[:-keep]:
        shutil.rmtree(local_dir / str(old), ignore_errors=True)


def local_steps(local_dir: Path) -> list[int]:
    """Steps in the local tier (`<step>/` folders), ascending."""
    if not local_dir.is_dir():
        return []
    return sorted(int(d.name) for d in local_dir.iterdir() if d.name.isdigit() and (d / "state").exists())


def params_sha256(cfg: Config, step: int) -> str:
    return hashlib.sha256(f"light:{cfg.seed}:{step}".encode()).hexdigest()


def run(cfg: Config, ident: Identity, events_file: str) -> int:
    def emit(event: str, **fields) -> None:
        append_event(events_file, event=event, process=ident.process_id, **{"step": None, **fields})

    notices: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: notices.append(True))
    step_s = cfg.step_time_ms / 1000.0
    progress = [time.monotonic()]  # when this process last did something: a long gap before a SIGCONT is a hang
    hangs: list[float] = []

    def beat() -> None:
        progress[0] = time.monotonic()

    def on_continue(*_) -> None:
        gap = time.monotonic() - progress[0]
        if hung(gap, step_s):
            hangs.append(gap)

    signal.signal(signal.SIGCONT, on_continue)
    sync = SyncFolder(cfg.run_directory, ident, beat) if ident.num_processes > 1 else None
    checkpoints = Path(cfg.persistent_checkpoint_directory)
    multi_tier = cfg.enable_checkpointing and cfg.enable_multi_tier_checkpointing
    emergency = cfg.enable_checkpointing and cfg.enable_emergency_checkpoint
    writes_persistent = cfg.enable_checkpointing and ident.slice_index == 0 and not multi_tier
    writes_local = multi_tier or (emergency and ident.slice_index > 0)
    item = "default" if cfg.enable_emergency_checkpoint else "items"
    t0 = time.time()
    mine = local_steps(Path(cfg.local_checkpoint_directory)) if cfg.local_checkpoint_directory else []
    if sync is not None:
        sync.post_start(mine)
    if multi_tier:  # what MTC restored into this ramdisk before the process started
        step, tier = (mine[-1], LOCAL) if mine else (0, None)
    else:
        done = finalized_steps(checkpoints) if cfg.enable_checkpointing else []
        local_newest = None
        if emergency:  # the processes agree on the newest step a slice holds whole in its ramdisks
            starts = sync.wait_for_starts(cfg.distributed_timeout_s) if sync is not None else {0: mine}
            if starts is None:
                print(f"error (retryable): not every process of the job started within {cfg.distributed_timeout_s}s",
                      file=sys.stderr, flush=True)
                return EXIT_RETRYABLE
            local_newest = newest_complete_local_step(starts, ident.hosts_per_slice)
        step, tier = restore_choice(done[-1] if done else None, local_newest)
    if step:
        print(f"restoring from this run's directory step {step}", flush=True)  # MaxText's line, that the provider reads
        print(f"restored step {step} from tier {tier}", flush=True)
        emit("restore", step=step, tier=tier, duration_s=round(time.time() - t0, 4))

    def save(at: int, force: bool = False) -> None:
        payload = json.dumps({"step": at, "seed": cfg.seed}).encode()
        # Each save blocks training while it writes: `save_blocking` records how long (the goodput's
        # checkpoint_save badput, core.view.goodput.timeline_from_workload_events).
        if writes_persistent and (force or persistent_save_due(cfg, at)):
            emit("save_start", step=at, tier="persistent")
            began = time.time()
            write_persistent(checkpoints, at, item, payload)
            emit("save_blocking", step=at, tier="persistent", blocking_s=round(time.time() - began, 6))
        if writes_local and (force or local_save_due(cfg, at)):
            emit("save_start", step=at, tier="local")
            began = time.time()
            write_local(Path(cfg.local_checkpoint_directory), at, payload, cfg.local_checkpoint_max_to_keep)
            emit("save_blocking", step=at, tier="local", blocking_s=round(time.time() - began, 6))

    def train_one() -> bool:
        """One step; False when this process was stopped (hung) and has just been resumed."""
        nonlocal step
        started = time.time()
        time.sleep(step_s)
        if hangs:
            return False
        step += 1
        beat()
        print(f"completed step: {step}, seconds: {time.time() - started:.3f}, loss: 0.0", flush=True)
        emit("step", step=step, seconds=round(time.time() - started, 4), loss=0.0)
        return True

    beat()
    while step < cfg.steps:
        if not train_one():
            return _left_after_hang(step, hangs[0], emit)
        if step < cfg.steps and (notices or (sync is not None and sync.sync_under_way())):
            return _preemption(cfg, sync, step, bool(notices), train_one, save, emit, hangs,
                               saves=writes_persistent or writes_local)
        save(step)
    if multi_tier:
        save(step, force=True)  # the last step in the local tier: the replicator backs it up
    emit("finish", step=step, params_sha256=params_sha256(cfg, step))
    return EXIT_OK


def _preemption(cfg: Config, sync: SyncFolder | None, step: int, noticed: bool, train_one, save, emit,
                hangs: list[float], saves: bool) -> int:
    """JAX's preemption sync: every process of the job takes part, they agree on the newest step reached, train up
    to it, save it (with autocheckpoint) and exit 0, MaxText's preemption exit. When a process cannot take part (a
    lost host, a hung one, a notice that reached it too late), nobody saves: exit 42, as the JAX workload's
    survivors of a dead peer do."""
    if hangs:  # resumed with the notice: the SIGTERM and SIGCONT handlers ran together, before this check
        return _left_after_hang(step, hangs[0], emit)
    posted = {0: step} if sync is None else sync.take_part(step, noticed, cfg.distributed_timeout_s)
    agreed = preemption_step(posted, 1 if sync is None else sync.ident.num_processes) if posted else None
    if agreed is None:
        print("preemption notice at step {}: not every process of the job took part in the sync; no save".format(step),
              file=sys.stderr, flush=True)
        emit("preempted", step=step, saved=False)
        return EXIT_RETRYABLE
    while step < agreed:  # a process behind the others catches up to the agreed step
        if not train_one():
            return _left_after_hang(step, hangs[0], emit)
        step += 1
    if cfg.enable_autocheckpoint:
        save(step, force=True)
    emit("preempted", step=step, saved=bool(cfg.enable_autocheckpoint and saves))
    return EXIT_OK


def _left_after_hang(step: int, gap_s: float, emit) -> int:
    """A hung process resumed by its pod's deletion (SIGTERM, then SIGCONT): a hung TPU process never reaches the
    preemption sync, so it saves nothing and ends as the SIGTERM's default action would."""
    print(f"resumed after {gap_s:.1f}s stopped at step {step}: no preemption save", file=sys.stderr, flush=True)
    emit("preempted", step=step, saved=False, hung_s=round(gap_s, 3))
    return EXIT_TERMINATED


def main(argv: list[str] | None = None) -> int:
    configured = configure(list(sys.argv[1:] if argv is None else argv))
    if isinstance(configured, int):
        return configured
    cfg, ident = configured
    events_file = cfg.events_file or events_path(cfg.base_output_directory, cfg.run_name, ident.process_id)
    append_event(events_file, event="start", process=ident.process_id, step=None, light=True,
                 num_processes=ident.num_processes, jobset=os.environ.get(ENV_JOBSET_NAME), pid=os.getpid())
    try:
        return run(cfg, ident, events_file)
    except OSError as err:  # a full or vanished disk: retryable, as the real workload treats I/O failures
        print(f"error (retryable): {err}", file=sys.stderr, flush=True)
        return EXIT_RETRYABLE


if __name__ == "__main__":
    sys.exit(main())
