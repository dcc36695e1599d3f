"""The local training workload (MaxText stand-in): real processes, real JAX distributed, real Orbax.

The multi-process tests start the workload the way the local JobSet runner does: one OS process per
host, a ramdisk directory per host under /dev/shm holding ``jax-init-info.txt``, and the JobSet
environment variables. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PROVIDER = REPO / "provider"
if str(PROVIDER) not in sys.path:
    sys.path.insert(0, str(PROVIDER))

from mtc_local import workload as wl  # noqa: E402  (pure until run: no JAX import)
from mtc_provider.adapters.workload_events import append_event, read_events  # noqa: E402

PYTHON = sys.executable
STEPS = 12
L = 2  # local_checkpoint_period
P = 6  # checkpoint_period
COMMON = [
    "enable_emergency_checkpoint=True",
    f"local_checkpoint_period={L}",
    f"checkpoint_period={P}",
    "model_dim=256",
    "global_batch_size=32",
    "seed=7",
    "distributed_timeout_s=30",
]
RUN_TIMEOUT = 120  # one job, generous: this 2-core machine is shared


# ---------------------------------------------------------------------------------------------
# Helpers: a tiny JobSet stand-in
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """N workload processes (num_slices x hosts_per_slice) on 127.0.0.1."""

    def __init__(self, root: Path, shm_root: Path, run_name: str = "run", num_slices: int = 2, hosts: int = 1):
        self.root = root
        self.shm_root = shm_root
        self.run_name = run_name
        self.num_slices = num_slices
        self.hosts = hosts
        self.base = root / "bucket"
        self.procs: list[subprocess.Popen] = []
        self.attempt = 0

    @property
    def n(self) -> int:
        return self.num_slices * self.hosts

    def ramdisk(self, pid: int) -> Path:
        return self.shm_root / f"host-{pid}"

    @property
    def checkpoints(self) -> Path:
        return self.base / self.run_name / "checkpoints"

    @property
    def events_dir(self) -> Path:
        return self.base / self.run_name / "events"

    def out(self, pid: int, attempt: int | None = None) -> Path:
        return self.root / f"attempt-{self.attempt if attempt is None else attempt}" / f"process-{pid}.out"

    def err(self, pid: int, attempt: int | None = None) -> Path:
        return self.root / f"attempt-{self.attempt if attempt is None else attempt}" / f"process-{pid}.err"

    def start(self, *flags: str) -> None:
        self.attempt += 1
        port = free_port()
        (self.root / f"attempt-{self.attempt}").mkdir(parents=True, exist_ok=True)
        self.procs = []
        for pid in range(self.n):
            ramdisk = self.ramdisk(pid)
            ramdisk.mkdir(parents=True, exist_ok=True)
            (ramdisk / "jax-init-info.txt").write_text(f"{pid}\n127.0.0.1:{port}\n")
            env = dict(os.environ)
            env.update(
                PYTHONPATH=str(PROVIDER),
                JOBSET_NAME="test-jobset",
                REPLICATED_JOB_NAME="slice",
                JOB_INDEX=str(pid // self.hosts),
                JOB_COMPLETION_INDEX=str(pid % self.hosts),
                MTC_NUM_SLICES=str(self.num_slices),
                MTC_HOSTS_PER_SLICE=str(self.hosts),
                JAX_PLATFORMS="cpu",
            )
            args = [
                PYTHON, "-m", "mtc_local.workload", "base.yml",
                f"run_name={self.run_name}",
                f"base_output_directory={self.base}",
                f"local_checkpoint_directory={ramdisk}",
                *flags,
            ]
            with open(self.out(pid), "wb") as out, open(self.err(pid), "wb") as err:
                self.procs.append(subprocess.Popen(args, env=env, stdout=out, stderr=err, cwd=self.root))

    def wait(self, timeout: float = RUN_TIMEOUT) -> list[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"job did not finish within {timeout}s\n{self.logs()}")
        return codes

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def last_step(self, pid: int) -> int:
        steps = re.findall(r"^completed step: (\d+),", self.out(pid).read_text(errors="replace"), re.M)
        return int(steps[-1]) if steps else 0

    def wait_until(self, predicate, timeout: float = RUN_TIMEOUT, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if any(p.poll() is not None for p in self.procs):
                pytest.fail(f"a process exited while waiting for {what}\n{self.logs()}")
            time.sleep(0.05)
        pytest.fail(f"timed out waiting for {what}\n{self.logs()}")

    def events(self, pid: int | None = None) -> list[dict]:
        evs = read_events(self.events_dir)
        return [e for e in evs if pid is None or e["process"] == pid]

    def logs(self) -> str:
        parts = []
        for pid in range(self.n):
            for f in (self.out(pid), self.err(pid)):
                if f.exists():
                    parts.append(f"--- {f.name} (attempt {self.attempt})\n{f.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def finalized_steps(self) -> list[int]:
        if not self.checkpoints.exists():
            return []
        return sorted(
            int(d.name) for d in self.checkpoints.iterdir()
            if d.name.isdigit() and (d / "commit_success.txt").exists()
        )

    def attempt_events(self, since_ts: float, kind: str) -> list[dict]:
        return [e for e in self.events() if e["ts"] >= since_ts and e["event"] == kind]


@pytest.fixture
def make_job(tmp_path):
    jobs: list[Job] = []
    shm_roots: list[Path] = []

    def factory(name: str = "job", **kw) -> Job:
        shm = Path("/dev/shm") / f"mtc-test-{uuid.uuid4().hex[:12]}"
        shm_roots.append(shm)
        job = Job(tmp_path / name, shm, **kw)
        jobs.append(job)
        return job

    try:
        yield factory
    finally:
        for job in jobs:
            job.kill()
        for shm in shm_roots:
            shutil.rmtree(shm, ignore_errors=True)


def finish_sha(job: Job, since_ts: float = 0.0) -> str:
    finishes = job.attempt_events(since_ts, "finish")
    assert len(finishes) == job.n, job.logs()
    shas = {e["params_sha256"] for e in finishes}
    assert len(shas) == 1, f"processes disagree on the final params: {finishes}"
    return shas.pop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A fault-free 2-process run (2 slices x 1 host), emergency on, L=2, P=6, steps=12."""
    root = tmp_path_factory.mktemp("reference")
    shm = Path("/dev/shm") / f"mtc-test-{uuid.uuid4().hex[:12]}"
    job = Job(root / "job", shm)
    try:
        t0 = time.monotonic()
        job.start(*COMMON, f"steps={STEPS}")
        codes = job.wait()
        elapsed = time.monotonic() - t0
        yield {"job": job, "codes": codes, "elapsed": elapsed, "sha": finish_sha(job) if codes == [0, 0] else None}
    finally:
        job.kill()
        shutil.rmtree(shm, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Fast tests: flags and events (no JAX)
# ---------------------------------------------------------------------------------------------


def test_flag_defaults_match_maxtext_guide():
    cfg = wl.parse_flags(["base.yml", "run_name=r", "base_output_directory=/tmp/x"])
    assert cfg.enable_checkpointing is True
    assert cfg.enable_emergency_checkpoint is False
    assert cfg.async_checkpointing is True
    assert cfg.local_checkpoint_directory == ""
    assert cfg.local_checkpoint_period == 0
    assert cfg.checkpoint_period == 10000
    assert cfg.enable_single_replica_ckpt_restoring is False
    assert cfg.enable_autocheckpoint is False
    assert cfg.persistent_checkpoint_directory == "/tmp/x/r/checkpoints"


@pytest.mark.parametrize("raw,value", [("True", True), ("true", True), ("1", True),
                                       ("False", False), ("false", False), ("0", False)])
def test_bool_spellings(raw, value):
    cfg = wl.parse_flags(["run_name=r", "base_output_directory=/tmp/x", f"enable_autocheckpoint={raw}"])
    assert cfg.enable_autocheckpoint is value


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run_name=r", "base_output_directory=/b", "no_such_flag=1"], "no_such_flag"),
        (["run_name=r", "base_output_directory=/b", "enable_autocheckpoint=yes"], "enable_autocheckpoint"),
        (["run_name=r", "base_output_directory=/b", "steps=ten"], "steps"),
        (["base_output_directory=/b"], "run_name"),
        (["run_name=r", "base_output_directory=/b", "enable_emergency_checkpoint=True"],
         "local_checkpoint_directory"),
        (["run_name=r", "base_output_directory=/b", "enable_emergency_checkpoint=True",
          "local_checkpoint_directory=/dev/shm/x"], "local_checkpoint_period"),
    ],
)
def test_bad_flags_are_named(args, needle):
    with pytest.raises(wl.FlagError, match=needle):
        wl.parse_flags(args)


def test_bad_flag_process_exits_2_and_names_the_key(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PROVIDER))
    r = subprocess.run(
        [PYTHON, "-m", "mtc_local.workload", "base.yml", "run_name=r",
         f"base_output_directory={tmp_path}", "enable_emergency_checkpoint=maybe"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2
    assert "enable_emergency_checkpoint" in r.stderr
    assert "True, False, true, false, 1, 0" in r.stderr
    r = subprocess.run(
        [PYTHON, "-m", "mtc_local.workload", "run_name=r", f"base_output_directory={tmp_path}",
         "checkpoint_every=5"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2
    assert "checkpoint_every" in r.stderr and "checkpoint_period" in r.stderr


def test_events_roundtrip_merge_and_torn_line(tmp_path):
    d = tmp_path / "events"
    append_event(d / "process-0.jsonl", event="start", process=0, step=None, ts=10.0)
    append_event(d / "process-1.jsonl", event="start", process=1, step=None, ts=9.0)
    append_event(d / "process-0.jsonl", event="restore", process=0, step=6, tier="local", duration_s=0.2, ts=11.0)
    with open(d / "process-1.jsonl", "a") as f:
        f.write('{"ts": 12.0, "event": "st')  # a process killed mid-write
    evs = read_events(d)
    assert [(e["process"], e["event"]) for e in evs] == [(1, "start"), (0, "start"), (0, "restore")]
    assert evs[2]["tier"] == "local"
    assert read_events(d / "process-0.jsonl")[0]["ts"] == 10.0
    assert read_events(tmp_path / "missing") == []
    with pytest.raises(ValueError):
        append_event(d / "x.jsonl", event="bogus", process=0, step=0)
    import numpy as np

    append_event(d / "np.jsonl", event="step", process=0, step=np.int64(8), loss=np.float32(0.5))
    assert read_events(d / "np.jsonl")[0]["step"] == 8


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("emergency", [2, 4, 5, 6, 8, 10, 12, 14, 15, 16, 17]),  # union of L=2, P=5 and the last step
        ("emergency-single-slice", [5, 10, 15, 17]),  # one replica: persistent tier only
        ("persistent", [5, 10, 15, 17]),
        ("none", []),
    ],
)
def test_save_due_is_a_pure_schedule(mode, expected):
    cfg = wl.parse_flags(["run_name=r", "base_output_directory=/b", "enable_emergency_checkpoint=True",
                          "local_checkpoint_directory=/dev/shm/x", "local_checkpoint_period=2",
                          "checkpoint_period=5", "steps=17"])
    assert [s for s in range(1, 18) if wl.save_due(cfg, s, mode)] == expected
    # Restarting from any step gives the same schedule: no dependence on what was saved before.
    assert [s for s in range(9, 18) if wl.save_due(cfg, s, mode)] == [s for s in expected if s >= 9]


def test_save_due_without_local_period_is_persistent_only():
    cfg = wl.parse_flags(["run_name=r", "base_output_directory=/b", "checkpoint_period=4", "steps=10"])
    assert [s for s in range(1, 11) if wl.save_due(cfg, s, "emergency")] == [4, 8, 10]


def test_read_init_info(tmp_path):
    f = tmp_path / "jax-init-info.txt"
    f.write_text("3\n127.0.0.1:1234\n")
    assert wl.read_init_info(f) == (3, "127.0.0.1:1234")
    assert wl.read_init_info(tmp_path / "nope") is None


# ---------------------------------------------------------------------------------------------
# Multi-process tests
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_slices_complete_and_finalize(reference):
    job: Job = reference["job"]
    assert reference["codes"] == [0, 0], job.logs()
    finalized = job.finalized_steps()
    assert finalized == [P, STEPS], finalized  # replica 0 writes persistent every P steps + the last
    assert (job.checkpoints / str(STEPS) / "default").is_dir()
    for pid in range(2):
        out = job.out(pid).read_text()
        assert f"completed step: {STEPS}," in out
        assert "no checkpoint found; starting from step 0" in out
    # The local tier lives in replica 1's ramdisk only (replica 0 writes persistent only).
    local = sorted(int(d.name) for d in job.ramdisk(1).iterdir() if d.name.isdigit())
    assert local and local[-1] == STEPS, local
    assert (job.ramdisk(1) / str(STEPS) / "commit_success.txt").exists()
    evs = job.events()
    assert {e["event"] for e in evs} >= {"start", "step", "save_start", "save_end", "finish"}
    assert {(e["process"], e["tier"]) for e in evs if e["event"] == "save_end"} == {(0, "persistent"), (1, "local")}
    # Saves land exactly on the flag schedule: persistent every P (+ the last step) on replica 0,
    # local every L on replica 1; nothing in between.
    starts = {(e["process"], e["tier"], e["step"]) for e in evs if e["event"] == "save_start"}
    assert starts == {(0, "persistent", s) for s in (P, STEPS)} | {(1, "local", s) for s in range(L, STEPS + 1, L)}
    # Each save also says how long it held training up (issue 35 item 6: the goodput's checkpoint_save badput).
    blocking = {(e["process"], e["tier"], e["step"]) for e in evs if e["event"] == "save_blocking"}
    assert blocking == starts and all(e["blocking_s"] > 0 for e in evs if e["event"] == "save_blocking")
    print(f"\n2-process 12-step run: {reference['elapsed']:.1f}s wall")


@pytest.mark.slow
def test_kill_one_process_resume_from_local_is_bit_identical(reference, make_job):
    assert reference["sha"], reference["job"].logs()
    job = make_job("kill")
    job.start(*COMMON, f"steps={STEPS}", "step_time_ms=250")

    def local_saved_at_least(step):
        return any(e["event"] == "save_end" and e["tier"] == "local" and e["step"] >= step
                   for e in job.events(1))

    job.wait_until(lambda: job.last_step(1) >= 7 and local_saved_at_least(6), what="step 7 and local save 6")
    finalized_local = max(e["step"] for e in job.events(1) if e["event"] == "save_end" and e["tier"] == "local")
    victim = job.procs[1]
    victim.send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    victim.wait(timeout=10)
    killed_step = job.last_step(1)
    survivor = job.procs[0]
    try:
        code = survivor.wait(timeout=30 + 15)  # distributed_timeout_s + slack
    except subprocess.TimeoutExpired:
        pytest.fail("the survivor did not exit on its own")
    survivor_exit_s = time.monotonic() - t_kill
    assert code == 42, job.logs()
    errors = [e for e in job.events(0) if e["event"] == "error"]
    assert errors, "the survivor must record why it stopped"

    restart_ts = time.time()
    job.start(*COMMON, f"steps={STEPS}", "step_time_ms=250")
    assert job.wait() == [0, 0], job.logs()
    restores = job.attempt_events(restart_ts, "restore")
    assert len(restores) == 2 and {e["tier"] for e in restores} == {"local"}, restores
    restored = restores[0]["step"]
    assert restored >= finalized_local  # nothing finalized is lost
    assert restored >= killed_step - 2 * L  # at most one period + one in-flight async save
    assert f"restored step {restored} from tier local" in job.out(0).read_text()
    assert finish_sha(job, restart_ts) == reference["sha"]
    assert job.finalized_steps()[-1] == STEPS
    print(f"\nkilled at step {killed_step}; survivor exited 42 after {survivor_exit_s:.2f}s; "
          f"restored {restored} from local in {restores[0]['duration_s']:.3f}s")


@pytest.mark.slow
def test_wiped_ramdisk_restores_from_persistent(reference, make_job):
    assert reference["sha"], reference["job"].logs()
    job = make_job("wipe")
    job.start(*COMMON, "steps=8")
    assert job.wait() == [0, 0], job.logs()
    assert job.finalized_steps() == [6, 8]
    # Replica 1 (the only holder of local checkpoints) lost its node: a new, empty ramdisk.
    shutil.rmtree(job.ramdisk(1))
    restart_ts = time.time()
    job.start(*COMMON, f"steps={STEPS}")
    assert job.wait() == [0, 0], job.logs()
    restores = job.attempt_events(restart_ts, "restore")
    assert [(e["step"], e["tier"]) for e in restores] == [(8, "persistent")] * 2, restores
    # Training resumed from persistent step 8 of a steps=8 run lands on the same params as 12 straight steps.
    assert finish_sha(job, restart_ts) == reference["sha"]
    print(f"\nrestored 8 from persistent in {restores[0]['duration_s']:.3f}s")


@pytest.mark.slow
def test_sigterm_autocheckpoint_saves_preemption_step(make_job):
    job = make_job("sigterm")
    flags = [*COMMON, "checkpoint_period=1000", "local_checkpoint_period=4", "steps=60",
             "step_time_ms=200", "enable_autocheckpoint=True"]
    job.start(*flags)
    job.wait_until(lambda: job.last_step(1) >= 3, what="step 3")
    job.procs[1].send_signal(signal.SIGTERM)
    assert job.wait() == [0, 0], job.logs()
    preempted = [e for e in job.events() if e["event"] == "preempted"]
    assert len(preempted) == 2 and len({e["step"] for e in preempted}) == 1, preempted
    step = preempted[0]["step"]
    assert 3 <= step < 60 and all(e["saved"] for e in preempted)
    assert job.finalized_steps() == [step]  # saved to persistent storage, finalized
    assert job.last_step(0) == job.last_step(1) == step  # 0 steps lost
    assert not [e for e in job.events() if e["event"] == "finish"]


@pytest.mark.slow
def test_sigterm_without_autocheckpoint_exits_0_without_saving(make_job):
    job = make_job("sigterm-noauto")
    job.start(*COMMON, "checkpoint_period=1000", "local_checkpoint_period=1000", "steps=60", "step_time_ms=200")
    job.wait_until(lambda: job.last_step(0) >= 3, what="step 3")
    job.procs[0].send_signal(signal.SIGTERM)
    assert job.wait() == [0, 0], job.logs()
    preempted = [e for e in job.events() if e["event"] == "preempted"]
    assert len(preempted) == 2 and not any(e["saved"] for e in preempted)
    assert job.finalized_steps() == []
