"""The run's ledger in the run lock (adapters.run_ledger), through the local target's real API server: what a trigger
observes is written off its loop, read back with kubectl as docs/resubmission.md says, and two live copies of one
trigger writing at once lose nothing and add nothing twice (the API server answers a stale resourceVersion with 409:
https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions; RunLock.update re-reads)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from mtc_local.cluster.client import LocalCluster
from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
from mtc_provider.adapters.run_ledger import read_ledger
from mtc_provider.adapters.run_lock import ATTEMPTS, RunLock
from mtc_provider.core.attempt.ledger import HOST_LOSS, PREEMPTION, RunLedger
from mtc_provider.core.basics import labels as L
from mtc_provider.triggers.jobset import JobSetTrigger
from tests.rehearsal.cluster.test_cluster_apiserver import kubectl
from tests.support.local_cluster import home, kubeconfig  # noqa: F401 - fixtures

RUN, NS = "ledger-run", "default"
TI = SimpleNamespace(dag_id="d", run_id="r", task_id="train", map_index=-1, try_number=1)
T0 = 1_765_000_000.0
MAXTEXT = "completed step: {step}, seconds: 2.281, TFLOP/s/device: 190.1, Tokens/s/device: 7180.3, " \
          "total_weights: 1048576, loss: {loss}"


def _trigger(home: str, clock: float) -> JobSetTrigger:
    """A watch that began at `clock` (its first start of the pods)."""
    trigger = JobSetTrigger(connection={"kind": "local", "home": home}, namespace=NS, name=f"{RUN}-a1",
                            extra={"attempt": 1, "run_name": RUN, "namespace": NS},
                            watch=WatchSettings(times=WatchTimes(progress_interval=30)))
    trigger.task_instance = TI
    trigger.clock = lambda: clock
    return trigger


def _observe(trigger: JobSetTrigger) -> None:
    """What the trigger's watch hands its ledger: the JobSet's restarts, the leader's log, a listing."""
    facts = trigger.facts()
    facts.jobset(0, 0, T0)
    facts.log_lines([(f"2025-12-06T05:46:{49 + s}Z", MAXTEXT.format(step=s, loss=9 - s / 10)) for s in (1, 2)],
                    T0 + 20)  # T0 is 05:46:40
    facts.jobset(1, 1, T0 + 30)  # counted towards maxRestarts: a host loss
    facts.log_lines([("2025-12-06T05:47:15Z", "restoring from this run's directory step 2"),
                     ("2025-12-06T05:47:16Z", "restored step 2 from tier local in 0.750s"),
                     ("2025-12-06T05:47:20Z", MAXTEXT.format(step=3, loss=8.7))], T0 + 60)
    facts.jobset(2, 1, T0 + 90)  # not counted: a graceful preemption handled in the cluster
    facts.saved(2, "persistent", T0 + 95)


def test_a_trigger_s_ledger_is_written_to_the_run_lock_and_read_back_with_kubectl(home, kubeconfig):
    lock = RunLock(LocalCluster(home), NS, RUN, L.run_labels("d", "r", "train", RUN))
    lock.acquire()
    lock.update(lambda data: data[ATTEMPTS].append({"attempt": 1, "jobset": f"{RUN}-a1", "start": T0}))
    first, second = _trigger(home, T0), _trigger(home, T0 + 1)
    _observe(first)
    _observe(second)

    async def both_flush() -> None:  # two live copies of the trigger write at once
        await asyncio.gather(first.facts().flush(first, T0 + 100, final=True),
                             second.facts().flush(second, T0 + 101, final=True))

    asyncio.run(both_flush())
    asyncio.run(first.facts().flush(first, T0 + 200, final=True))  # nothing new: nothing written

    data = json.loads(kubectl(kubeconfig, "get", "configmap", L.lock_name(RUN), "-n", NS, "-o",
                              "jsonpath={.data.ledger}"))
    ledger = RunLedger.from_dict(data)
    assert ledger == read_ledger(lock)
    assert [(s.attempt, s.restart) for s in ledger.starts] == [(1, 0), (1, 1), (1, 2)]
    assert [(i.kind, i.restart) for i in ledger.interruptions] == [(HOST_LOSS, 1), (PREEMPTION, 2)]
    restored = ledger.starts[1]
    assert (restored.restored_step, restored.restored_tier, restored.restore_seconds) == (2, "local", 0.75)
    assert [p.to_list() for p in ledger.steps] == [[T0 + 10, 1, 8.9, 2.281], [T0 + 11, 2, 8.8, 2.281],
                                                   [T0 + 40, 3, 8.7, 2.281]]
    assert [(s.at, s.first_step_at) for s in ledger.starts] == [(T0, T0 + 10), (T0 + 30, T0 + 40), (T0 + 90, None)]
    assert [(s.step, s.tier) for s in ledger.saves] == [(2, "persistent")]
    assert lock.read()[ATTEMPTS][0]["jobset"] == f"{RUN}-a1"  # the lock's other keys are left as they were
