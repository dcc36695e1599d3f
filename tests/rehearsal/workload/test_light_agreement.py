"""The light workload keeps only what a TPU keeps: the processes of a start agree on a preemption save and on the
step they restore, as JAX's preemption sync and Orbax's emergency manager make the real workload's processes agree.

JAX's preemption sync (jax/_src/distributed, PreemptionSyncManager) is a barrier over every process of the job, so a
process that is dead or hung leaves the others without a save; the facts the rules follow: a slice that lost a host
cannot reach a collective save, only a notice every host takes part in within the grace period saves; Orbax's
emergency manager restores the newest step some slice holds complete in its ramdisks. MaxText logs
"restoring from this run's directory step N" before it restores (src/MaxText/checkpointing.py
`load_state_if_possible`), the line the provider reads (core.measure.step_log.parse_restore_line).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mtc_local.light_workload import finalized_steps
from mtc_local.workload.agreement import (
    hung,
    newest_complete_local_step,
    preemption_step,
    restore_choice,
)
from mtc_provider.adapters.workload_events import read_events
from mtc_provider.core.measure.step_log import parse_restore_line


# ---- the rules, over plain values ------------------------------------------------------------------------------
@pytest.mark.parametrize("local, hosts, expected", [
    ({0: [], 1: [4, 6]}, 1, 6),                      # slice 1 holds 6 whole; slice 0 (persistent writer) none
    ({0: [4, 6], 1: [4]}, 2, 4),                     # one slice of two hosts: only 4 is on both
    ({0: [], 1: [], 2: [4, 6], 3: [6, 8]}, 2, 6),    # slice 1 holds 6 on both hosts, 8 on one only
    ({0: [], 1: [], 2: [4, 6], 3: []}, 2, None),     # a wiped ramdisk: no slice holds a step whole
    ({0: [4], 1: [4]}, 3, None),                     # a host of the slice never posted
])
def test_the_newest_local_step_is_one_every_host_of_a_slice_holds(local, hosts, expected):
    assert newest_complete_local_step(local, hosts) == expected


@pytest.mark.parametrize("persistent, local, expected", [
    (10, 14, (14, "local")),
    (10, 10, (10, "local")),       # Orbax reads the ramdisk when a slice holds the step whole
    (20, 14, (20, "persistent")),
    (20, None, (20, "persistent")),
    (None, None, (0, None)),
])
def test_a_start_restores_the_newer_tier(persistent, local, expected):
    assert restore_choice(persistent, local) == expected


@pytest.mark.parametrize("posted, n, expected", [
    ({0: 7, 1: 8}, 2, 8),         # every process took part: the newest step reached
    ({0: 7}, 2, None),            # one host never took part (lost, hung, or the notice came too late)
    ({0: 7, 2: 7}, 2, None),      # a post from outside the job does not stand in for a missing process
    ({0: 3}, 1, 3),
])
def test_a_preemption_saves_only_when_every_process_takes_part(posted, n, expected):
    assert preemption_step(posted, n) == expected


def test_a_resume_after_a_long_gap_is_a_hang():
    assert hung(2.5, 0.02) and not hung(0.5, 0.02) and not hung(3.0, 0.2)


# ---- two real light processes sharing a run folder ----------------------------------------------------------------
def _start(tmp: Path, process_id: int, slices: int, hosts: int, *flags: str, port: int = 1) -> subprocess.Popen:
    ramdisk = tmp / f"ramdisk-{process_id}"
    ramdisk.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "mtc_local.light_workload", "run_name=r", f"base_output_directory={tmp}",
            f"local_checkpoint_directory={ramdisk}", "step_time_ms=20", "distributed_timeout_s=20", *flags]
    env = {**os.environ, "MTC_PROCESS_ID": str(process_id), "MTC_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
           "MTC_NUM_SLICES": str(slices), "MTC_HOSTS_PER_SLICE": str(hosts)}
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _until_step(proc: subprocess.Popen, step: int, out: list[str]) -> None:
    for line in proc.stdout:
        out.append(line)
        if line.startswith(f"completed step: {step},"):
            return
    raise AssertionError(f"the process ended before step {step}: {''.join(out)}")


def _job(tmp: Path, slices: int = 1, hosts: int = 2, *flags: str) -> tuple[list[subprocess.Popen], list[list[str]]]:
    procs = [_start(tmp, i, slices, hosts, *flags) for i in range(slices * hosts)]
    outs: list[list[str]] = [[] for _ in procs]
    for proc, out in zip(procs, outs):
        _until_step(proc, 5, out)
    return procs, outs


def _finish(procs: list[subprocess.Popen], outs: list[list[str]]) -> list[int]:
    codes = []
    for proc, out in zip(procs, outs):
        rest, _ = proc.communicate(timeout=30)
        out.append(rest)
        codes.append(proc.returncode)
    return codes


PREEMPTIBLE = ("steps=100000", "checkpoint_period=100000", "enable_autocheckpoint=True")


def _preempted(tmp: Path) -> list[bool]:
    return [e["saved"] for e in read_events(tmp / "r" / "events") if e["event"] == "preempted"]


def test_a_notice_every_host_takes_part_in_saves_one_step_and_exits_zero(tmp_path: Path):
    procs, outs = _job(tmp_path, 1, 2, *PREEMPTIBLE)
    for proc in procs:  # a preemption of the slice: every host gets the SIGTERM
        proc.send_signal(signal.SIGTERM)
    assert _finish(procs, outs) == [0, 0], outs
    saved = finalized_steps(tmp_path / "r" / "checkpoints")
    assert len(saved) == 1 and saved[0] >= 5
    assert _preempted(tmp_path) == [True, True]


def test_a_live_host_the_notice_missed_joins_the_sync_as_jax_propagates_it(tmp_path: Path):
    procs, outs = _job(tmp_path, 1, 2, *PREEMPTIBLE)
    procs[0].send_signal(signal.SIGTERM)  # JAX's sync reaches every process of the job through the coordinator
    assert _finish(procs, outs) == [0, 0], outs
    assert len(finalized_steps(tmp_path / "r" / "checkpoints")) == 1


def test_the_survivors_of_a_host_loss_do_not_save(tmp_path: Path):
    procs, outs = _job(tmp_path, 1, 2, *PREEMPTIBLE)
    procs[1].send_signal(signal.SIGKILL)  # the host is lost
    procs[1].wait(10)
    procs[0].send_signal(signal.SIGTERM)  # the JobSet restart terminates the survivor
    assert _finish(procs[:1], outs[:1]) == [42], outs[0]
    assert finalized_steps(tmp_path / "r" / "checkpoints") == []
    assert _preempted(tmp_path) == [False]


def test_a_notice_that_misses_a_host_until_its_grace_period_ends_does_not_save(tmp_path: Path):
    procs, outs = _job(tmp_path, 1, 2, *PREEMPTIBLE)
    procs[1].send_signal(signal.SIGSTOP)  # this host cannot take the notice
    procs[0].send_signal(signal.SIGTERM)
    assert _finish(procs[:1], outs[:1]) == [42], outs[0]
    procs[1].send_signal(signal.SIGKILL)  # its grace period ended
    procs[1].wait(10)
    assert finalized_steps(tmp_path / "r" / "checkpoints") == []


def test_a_hung_process_resumed_by_its_deletion_does_not_save(tmp_path: Path):
    procs, outs = _job(tmp_path, 1, 2, *PREEMPTIBLE)
    procs[0].send_signal(signal.SIGSTOP)  # a hang of the persistent writer's host
    time.sleep(2.5)
    for proc in procs:  # the deletion, as the local runner terminates a pod: SIGTERM, then SIGCONT
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
    codes = _finish(procs, outs)
    assert codes == [143, 42], outs
    assert finalized_steps(tmp_path / "r" / "checkpoints") == []
    assert sorted(_preempted(tmp_path)) == [False, False]


def test_a_restart_restores_the_newer_local_tier_and_logs_it_as_maxtext_does(tmp_path: Path):
    flags = ("checkpoint_period=100000", "enable_emergency_checkpoint=True", "local_checkpoint_period=2",
             "local_checkpoint_max_to_keep=2")
    procs, outs = _job(tmp_path, 2, 1, "steps=100000", *flags)  # slice 0 writes persistent, slice 1 its ramdisk
    for proc in procs:
        proc.send_signal(signal.SIGKILL)  # the whole job lost: only the ramdisks keep anything
    _finish(procs, outs)
    held = sorted(int(d.name) for d in (tmp_path / "ramdisk-1").iterdir() if d.name.isdigit())
    assert held and finalized_steps(tmp_path / "r" / "checkpoints") == []

    # A new start of the pods: a new coordinator (the local runner picks a free port at every start).
    again = [_start(tmp_path, i, 2, 1, f"steps={held[-1] + 3}", *flags, port=2) for i in range(2)]
    again_outs: list[list[str]] = [[], []]
    assert _finish(again, again_outs) == [0, 0], again_outs
    for out in again_outs:
        lines = "".join(out).splitlines()
        assert [parse_restore_line(line) for line in lines if parse_restore_line(line)] == [held[-1]]
        assert f"restored step {held[-1]} from tier local" in lines
        assert f"completed step: {held[-1] + 1}, " in "".join(out)
    restores = [e for e in read_events(tmp_path / "r" / "events") if e["event"] == "restore"]
    assert sorted((e["process"], e["step"], e["tier"]) for e in restores) == [(0, held[-1], "local"),
                                                                              (1, held[-1], "local")]


def _save_steps(directory: str, steps: int) -> None:
    from mtc_local.light_workload import write_persistent

    for step in range(1, steps + 1):
        write_persistent(Path(directory), step, "default", b"{}")


def test_two_hosts_saving_the_same_steps_at_once_commit_each_step_once(tmp_path: Path):
    """After a preemption sync every host of slice 0 saves the agreed step at the same moment; the persistent step
    is finalized once (Orbax's primary host does it), never torn by two writers in one tmp folder."""
    import multiprocessing

    checkpoints = tmp_path / "r" / "checkpoints"
    checkpoints.mkdir(parents=True)
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_save_steps, args=(str(checkpoints), 200)) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert [w.exitcode for w in writers] == [0, 0]
    assert sorted(int(p.name) for p in checkpoints.iterdir()) == list(range(1, 201))
    assert all((checkpoints / str(step) / "commit_success.txt").exists() for step in range(1, 201))
