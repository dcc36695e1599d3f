"""A graceful preemption restarted in the cluster (`workload.graceful_preemption: in_cluster`) on the local target
(the local runner's JobSet, pods as processes, the local API server), through the launch operator (synchronous).

`sigterm_slice` on both slices at step 8 marks the pods `DisruptionTarget` and SIGTERMs them, as a graceful node
shutdown does (kubernetes.io "Pod disruption conditions", reason TerminationByKubelet); the light workload saves
(autocheckpoint) and exits 0, as MaxText does. Under core.definition.render.graceful_exit's wrapper the container exits
143 instead (stopped by SIGTERM below its last step): the pod fails, podFailurePolicy rule 0 (onPodConditions
DisruptionTarget, FailJob) fails its Job with the Job controller's message, and the JobSet rule RestartOnDisruption
(RestartJobSetAndIgnoreMaxRestarts) recreates every slice without counting (JobSet docs "Failure Policy", the
`host-maintenance-event-model` example; the runner applies it in mtc_local.runner.policy). So the run reaches its
target in one attempt, with one in-cluster restart, and `max_restarts: 0` is never touched. The same preemption
without the wrapper is one attempt more (tests/operators/jobset/test_js_local_next_in_trigger.py).
"""

from __future__ import annotations

import pytest

from mtc_local.cluster.client import LocalCluster
from mtc_provider.adapters.workload_events import events_dir, read_events
from tests.support.js_helpers import FakeTI
from tests.support.local_light_run import home, light_run_operator  # noqa: F401 - home is a fixture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # 6.2 s measured at load 5.6 (2 shared cores); slow: a real run

STEPS, PERSISTENT = 16, 5
FAULTS = [{"kind": "sigterm_slice", "at_step": 8, "slice": 0}, {"kind": "sigterm_slice", "at_step": 8, "slice": 1}]


def test_a_graceful_preemption_restarts_in_the_cluster_without_a_new_attempt(tmp_path, home):
    op = light_run_operator(tmp_path, home, "gic", STEPS, PERSISTENT, FAULTS,
                            {"max_restarts": 0, "graceful_preemption": "in_cluster"}, deferrable=False,
                            crash_loop_attempts=2)
    ti = FakeTI(run_id="gic", max_tries=1)
    result = op.execute({"ti": ti})
    assert result["last_step"] == STEPS
    attempts = ti.xcoms["attempts"]
    assert [(a["attempt"], a["outcome"], a["restarts"]) for a in attempts] == [(1, "finished", 1)], attempts
    fired = LocalCluster(str(home)).run_faults("default", "gic")
    assert len(fired) == 2 and {f["restart"] for f in fired} == {0}, fired
    events = read_events(events_dir(str(tmp_path / "bucket"), "gic"))
    preempted = [e for e in events if e["event"] == "preempted"]
    assert preempted and all(e["saved"] for e in preempted), preempted
    # the restarted pods resumed from the preemption's save, not from the start
    restores = [e for e in events if e["event"] == "restore" and e["process"] == 0]
    assert restores and restores[-1]["step"] >= 8, restores
