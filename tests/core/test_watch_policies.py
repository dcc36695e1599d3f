"""The pure decisions the JobSet trigger leaves to the core: a listing that keeps failing (core.measure.listing,
shared with the checkpoint sensor's trigger), the starts of the pods (core.attempt.pod_start) and the stall rules
(core.measure.stall), fed by hand with the clock stepped, as the trigger feeds them.

Pod shapes: tests/core/test_pods_status.py (kubernetes.io "Pod Lifecycle"; ImagePullBackOff is retried with back-off).
"""

from __future__ import annotations

from mtc_provider.core.attempt.jobset_events import STARTUP_TIMEOUT, UNSTARTABLE
from mtc_provider.core.attempt.pod_start import PodStart
from mtc_provider.core.attempt.status import evaluate_pods
from mtc_provider.core.measure.listing import ListingOutage
from mtc_provider.core.measure.progress import PERSISTENT
from mtc_provider.core.measure.stall import StallWatch
from tests.core.test_pods_status import pod

PULL = ("ErrImagePull", 'failed to pull and unpack image "us-docker.pkg.dev/p/r/m:v1": 503 Service Unavailable')
WHERE = "JobSet ml/train"


class ServiceUnavailable(Exception):
    code, message = 503, "the bucket is not answering"


def test_a_listing_outage_ends_only_after_listing_timeout_and_its_time_comes_off_the_clock():
    listing = ListingOutage("gs://ckpt-bucket/run/checkpoints", timeout=600)
    line, end = listing.failed(1000.0, ServiceUnavailable())
    assert end == "" and "HTTP 503 ServiceUnavailable" in line and "(0s of listing_timeout 600s)" in line
    assert listing.failed(1600.0, ServiceUnavailable())[1] == ""  # at the bound: still waited out
    assert listing.answered(1650.0) == 650.0 and listing.answered(1700.0) is None  # paused once, then clear
    listing.failed(2000.0, TimeoutError("read timed out"))
    _, end = listing.failed(2601.0, TimeoutError("read timed out"))
    assert end == ("the checkpoint listing of gs://ckpt-bucket/run/checkpoints (bucket ckpt-bucket) kept failing for "
                   "601s (listing_timeout 600s): TimeoutError: read timed out (no HTTP answer)")


def test_each_start_of_the_pods_gets_its_own_image_pull_clock_and_a_permanent_error_ends_at_once():
    starts = PodStart(startup_timeout=None, image_pull_timeout=60, capacity_log_interval=3600)
    assert starts.check(evaluate_pods([pod("a0", waiting=PULL, attempt=0)]), 0, WHERE) == \
        (None, [f"{WHERE}: waiting for the image pull / container creation for 0s (image_pull_timeout 60s; "
                f"Kubernetes retries with back-off): pod a0 container jax-tpu: {PULL[0]}: {PULL[1]}"])
    # a restart (the next restart-attempt label) before the bound: its pull is timed from its own first error
    assert starts.check(evaluate_pods([pod("a1", waiting=PULL, attempt=1)]), 50, WHERE) == (None, [])
    assert starts.check(evaluate_pods([pod("a1", waiting=PULL, attempt=1)]), 110, WHERE) == (None, [])
    (kind, message), _ = starts.check(evaluate_pods([pod("a1", waiting=PULL, attempt=1)]), 111, WHERE)
    assert kind == UNSTARTABLE and "for 61s (image_pull_timeout 60s)" in message
    bad = ("InvalidImageName", 'couldn\'t parse image name "gcr.io/p/m::1"')
    (kind, message), _ = PodStart(None, None, 3600).check(evaluate_pods([pod("a0", waiting=bad)]), 0, WHERE)
    assert kind == UNSTARTABLE and message.startswith(f"a pod of {WHERE} can never start: ")


def test_scheduled_pods_that_wait_ask_for_their_events_and_the_startup_timeout_names_them():
    starts = PodStart(startup_timeout=600, image_pull_timeout=None, capacity_log_interval=300)
    waiting = evaluate_pods([pod("a0", waiting=("ContainerCreating", ""), attempt=0), pod("b0", "Running", attempt=0)])
    assert starts.check(waiting, 0, WHERE) == (None, []) and starts.wants_events(waiting, 0)
    end, lines = starts.waited(waiting, 0, WHERE, ["pod a0 on node n7: FailedMount (x3): ramdisk"])
    assert end is None and lines[0].endswith("Kubernetes events: pod a0 on node n7: FailedMount (x3): ramdisk")
    starts.check(waiting, 100, WHERE)
    assert not starts.wants_events(waiting, 100)  # no line due, no timeout yet: no events listed
    starts.check(waiting, 601, WHERE)
    (kind, message), _ = starts.waited(waiting, 601, WHERE, [])  # an empty listing keeps the last events said
    assert kind == STARTUP_TIMEOUT and message.endswith("; Kubernetes events: pod a0 on node n7: FailedMount (x3): "
                                                        "ramdisk")


def test_the_stall_clock_counts_only_while_the_pods_run_and_names_the_limit():
    stall = StallWatch(stall_timeout=600)
    stall.not_running(0)
    stall.not_running(5000)  # pending for hours (capacity): no stall, and the clock starts when the pods run
    stall.running(5000)
    assert stall.signal.observe(10, PERSISTENT, 5100)
    stall.running(5700)
    assert stall.verdict(5700, WHERE, "gs://b/run/checkpoints") is None  # 600 s since step 10: at the limit
    reason = stall.verdict(5701, WHERE, "gs://b/run/checkpoints")
    assert reason.startswith("stalled: no new finalized checkpoint nor any other progress in gs://b/run/checkpoints "
                             "for 601s (stall limit 600s: stall_timeout;") and "newest finalized step 10" in reason
    stall.pause(100)  # a listing outage: its time is not "no progress"
    assert stall.verdict(5701, WHERE, "gs://b/run/checkpoints") is None
