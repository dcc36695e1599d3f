"""A graceful preemption restarted in the cluster: the rendered command, and the wrapper's exit codes run for real.

The wrapper (core.definition.render.graceful_exit) runs here as the container runs it, `python3 -c SOURCE <last> <command>`,
around small Python workloads; SIGTERM goes to the wrapper alone, as the kubelet sends it to a container's first
process (kubernetes.io "Pod Lifecycle", termination of pods).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
from core_helpers import checkpointing, slices, workload

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.render.graceful_exit import (
    EXIT_STOPPED_BELOW_TARGET,
    WRAPPER_SOURCE,
    wrap_command,
)
from mtc_provider.core.definition.render.jobset_manifest import RETRYABLE_EXIT_CODES, build_jobset, pod_template

LIGHT = ("python3", "-m", "mtc_local.light_workload")


def container(**overrides) -> dict:
    steps = overrides.pop("steps", 100)
    return pod_template(build_jobset(slices(), checkpointing(steps=steps), workload(**overrides)))["spec"]["containers"][0]


def test_in_cluster_wraps_the_command_with_the_last_step_and_keeps_the_args() -> None:
    plain, wrapped = container(), container(graceful_preemption="in_cluster")
    # MaxText's steps=100 runs steps 0..99: its last `completed step` is 99 (core.definition.render.maxtext.last_step)
    assert wrapped["command"] == ["python3", "-c", WRAPPER_SOURCE, "99", *plain["command"]]
    assert wrapped["args"] == plain["args"]
    light = container(graceful_preemption="in_cluster", command=LIGHT, steps=30)
    assert light["command"][3:] == ["30", *LIGHT]  # the local workloads end at `steps`


def test_operator_keeps_the_workloads_own_command_and_the_default_is_documented() -> None:
    assert container(graceful_preemption="operator")["command"][:3] == ["python3", "-m",
                                                                        "maxtext.trainers.pre_train.train"]
    with pytest.raises(SpecError) as caught:
        workload(graceful_preemption="cluster")
    assert caught.value.field == "workload.graceful_preemption" and "in_cluster" in caught.value.allowed


def test_the_wrapper_code_is_retryable_and_never_expanded_by_kubernetes() -> None:
    assert EXIT_STOPPED_BELOW_TARGET == 128 + signal.SIGTERM and EXIT_STOPPED_BELOW_TARGET in RETRYABLE_EXIT_CODES
    assert "$(" not in WRAPPER_SOURCE  # Kubernetes expands $(VAR) in a command


# A workload that prints its steps, handles SIGTERM as MaxText does (train on to the preemption sync's step, at least
# argv[2], then exit 0), and ends at `steps`.
WORKLOAD = textwrap.dedent("""
    import signal, sys, time
    steps, sync_at, stop = int(sys.argv[1]), int(sys.argv[2]), []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print("ready", flush=True)
    for step in range(1, steps + 1):
        time.sleep(0.05)
        print(f"I1206 12:00:00 train.py:1] completed step: {step}, seconds: 0.050, loss: 0.0",
              file=sys.stderr if step % 2 else sys.stdout, flush=True)
        if stop and step >= sync_at:
            sys.exit(0)
    print("done", flush=True)
""")


def wrapped(last: int, child: list[str], sigterm_after: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-c", WRAPPER_SOURCE, str(last), *child],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    if sigterm_after is not None:
        assert proc.stdout is not None
        while sigterm_after.encode() not in out:
            line = proc.stdout.readline()
            assert line, "the workload ended before the SIGTERM"
            out += line
        proc.send_signal(signal.SIGTERM)  # to the wrapper only, as the kubelet does
    rest, err = proc.communicate(timeout=20)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out + rest, err)


def workload_cmd(steps: int, sync_at: int = 0) -> list[str]:
    return [sys.executable, "-c", WORKLOAD, str(steps), str(sync_at)]


def test_sigterm_below_the_last_step_exits_143_and_the_output_passes_through() -> None:
    done = wrapped(50, workload_cmd(50), sigterm_after="ready")
    assert done.returncode == EXIT_STOPPED_BELOW_TARGET, done.stderr
    assert b"completed step: 1," in done.stderr and b"ready" in done.stdout  # each stream to its own
    assert b"mtc: stopped by SIGTERM at step" in done.stderr and b"done" not in done.stdout


def test_sigterm_at_the_last_step_and_an_exit_0_without_sigterm_pass_through() -> None:
    finished = wrapped(3, workload_cmd(3, sync_at=3), sigterm_after="completed step: 2")  # saves step 3, the last
    assert finished.returncode == 0, finished.stderr
    below_without_notice = wrapped(10, workload_cmd(3))  # MaxText's "out of data": no SIGTERM, the operator's path
    assert below_without_notice.returncode == 0 and b"done" in below_without_notice.stdout


@pytest.mark.parametrize("child, code", [
    (["-c", "import sys; sys.exit(2)"], 2),  # a bug's code stays a bug
    (["-c", "import sys; sys.exit(42)"], 42),
    (["-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], 137),  # killed by a signal: 128 + N
])
def test_other_exits_keep_their_code(child, code) -> None:
    assert wrapped(10, [sys.executable, *child]).returncode == code


def test_a_command_that_cannot_start_exits_127() -> None:
    done = wrapped(10, ["/nonexistent/trainer"])
    assert done.returncode == 127 and b"cannot start" in done.stderr


def test_wrap_command() -> None:
    assert wrap_command(["a", "b"], 7) == ["python3", "-c", WRAPPER_SOURCE, "7", "a", "b"]


def test_in_cluster_warns_that_the_budget_is_judged_at_an_attempts_end() -> None:
    """A graceful preemption restarted in the cluster ends no attempt, and the budget is judged at an attempt's end
    (measured: 4 preemptions 3 steps apart, budget_interruptions 3, min_steps_per_interruption 10 on the local
    target: `operator` ended the run over budget after 3 attempts, `in_cluster` ran on to the target with 4
    restarts; docs/resubmission.md)."""
    from mtc_provider.core.definition.description.run_checks import check_run

    assert check_run("gke", slices(), workload=workload()).warnings == ()
    (warning,) = check_run("gke", slices(), workload=workload(graceful_preemption="in_cluster")).warnings
    assert "budget" in warning and "python3" in warning
