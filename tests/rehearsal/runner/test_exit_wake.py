"""The supervisor's loop sees a pod's exit when it happens (runner.pods `wait_for_exit`), not at its next tick:
a JobSet fails as soon as its pod dies, as a kubelet reports a container's end at once. Bounded wall times with
wide margins (a loaded machine), no benchmark."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mtc_local.runner.pods import wait_for_exit

LONG_S = 30.0  # the wait's bound: the exit must end it far sooner


def _child(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfds are Linux's")
def test_a_pod_s_exit_ends_the_wait_at_once():
    proc = _child(0.3)
    try:
        began = time.monotonic()
        woke = wait_for_exit([proc.pid], LONG_S)
        assert time.monotonic() - began < LONG_S / 3, "the wait did not end when the pod exited"
        assert woke == {proc.pid}
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfds are Linux's")
def test_an_exited_unreaped_pod_wakes_it_and_a_running_one_does_not():
    running, unreaped = _child(60), _child(0)
    try:
        time.sleep(0.5)  # exited (or about to), not reaped: the supervisor's next tick reaps it
        began = time.monotonic()
        assert wait_for_exit([running.pid, unreaped.pid], LONG_S) == {unreaped.pid}
        assert time.monotonic() - began < LONG_S / 3
        began = time.monotonic()
        assert wait_for_exit([running.pid], 0.2) == set()  # no exit: the whole tick
        assert time.monotonic() - began >= 0.2
        unreaped.wait()
    finally:
        running.kill()
        running.wait()


def test_nothing_to_watch_is_a_plain_tick():
    began = time.monotonic()
    assert wait_for_exit([], 0.05) == set()
    assert time.monotonic() - began >= 0.05
