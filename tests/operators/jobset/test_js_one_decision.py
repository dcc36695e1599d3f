"""An attempt's end is decided once, by the trigger, and the worker applies it (issue 40, finding 9).

The trigger lists the newest restorable step when the JobSet ends, decides (core.attempt.resubmission) and carries
the decision in its event (`verdict`); the worker closes the attempt on it without listing or deciding again, and the
next attempt of the same try plans from the step the end was decided on. Only when the trigger could not list (a
storage outage: tests/operators/jobset/test_js_storage_forbidden.py) does the worker list and decide itself.

Through the launch operator's synchronous path (the same trigger, run to its first event in the worker) on the
in-memory JobSet cluster (tests/doubles/memory_jobset.py), counting the worker's own listings.
"""

from __future__ import annotations

from mtc_provider.adapters.checkpoint_stores import LocalCheckpointStore
from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.js_helpers import FakeTI, launch, reach, run_try


class CountingStore(LocalCheckpointStore):
    """The worker's checkpoint store, counting its listings."""

    def __init__(self) -> None:
        self.listings = 0

    def finalized(self, checkpoint_dir: str, after: int | None = None):
        self.listings += 1
        return super().finalized(checkpoint_dir, after)


def test_the_worker_applies_the_triggers_decision_without_listing_again(tmp_path, cluster, fast_retries):
    store = CountingStore()
    # a preemption after progress (followed in this try), then the target
    cluster.plan([status_running(), reach(tmp_path, 40, status_completed())],
                 [status_running(), reach(tmp_path, 100, status_completed())])
    ti = FakeTI(try_number=1, max_tries=2)
    result = run_try(launch(str(tmp_path), retries=2, checkpoint_store_factory=lambda d, c: store), ti)

    assert result["last_step"] == 100 and len(cluster.created) == 2
    # one listing, planning the first attempt; both ends and the second plan used the trigger's listing
    assert store.listings == 1
    ended = ti.xcoms["attempts"][0]
    assert ended["last_step"] == 40 and ended["in_try"], ended
    assert [d["kind"] for d in ti.xcoms["ledger"]["decisions"]] == ["next-attempt-in-try", "succeed"]
