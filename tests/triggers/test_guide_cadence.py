"""The stall check at the guide's cadence (issue 32): rare persistent saves, a step every few seconds.

examples/gke-v6e.yaml saves a persistent checkpoint every 1000 steps; at MaxText's published v6e throughput for
Llama-2-70B (~900 tokens/s per device, batch 1 x 2048 tokens: ~2.28 s a step) that is one every ~38 minutes
(/work/shared/notes/facts.md, "A real run's cadence"). The leader logs `completed step: N` every step (MaxText's
`MetricLogger.log_metrics`: core.measure.step_log). The trigger's clock is stepped by hand; the checkpoints are real objects
in the GCS emulator (tests/support/checkpoint_fixtures.py); the leader's log is served by the Kubernetes API double,
which answers `read log` as the API reference documents (tailLines, sinceSeconds, timestamps: see
tests/adapters/test_js_pod_logs.py) and is read through the real kubernetes client and LeaderLogFollower.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.adapters.test_js_pod_logs import add_pod, factory
from tests.doubles.kubernetes import KubernetesApiDouble
from tests.support.checkpoint_fixtures import GCS_CONN_ID
from mtc_provider.core.attempt.launch_options import PodLogs, WatchSettings, WatchTimes
from mtc_provider.adapters.pod_logs import KubernetesPodLogs, LeaderLogFollower
from mtc_provider.core.measure.progress import replicator_backup_dir
from mtc_provider.core.attempt.attempt_records import end_of_attempt
from mtc_provider.core.attempt.jobset_events import JobSetEvent
from mtc_provider.core.attempt.launch import SUBMIT, plan_launch
from mtc_provider.core.attempt.resubmission import FAIL, RETRY, SUCCEED, decide, restorable_progress, resubmit_in_try
from mtc_provider.core.definition.description.run import parse_run, stall_rule
from mtc_provider.core.attempt.status import JobSetState
from mtc_provider.triggers.jobset import JobSetTrigger

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
STEP_S = 2048 / 900  # seconds a step: Llama-2-70B on v6e, batch 1 x 2048 tokens at ~900 tokens/s per device
RUNNING = JobSetState("train", "default", "running")


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def core():
    double = KubernetesApiDouble().start()
    add_pod(double, "train-slice-0-0-aaaaa", 0, 0)  # the leader: job index 0, completion index 0
    yield double
    double.stop()


def _description(run: str, **changes) -> dict:
    data = yaml.safe_load((REPO / "examples/gke-v6e.yaml").read_text())
    data["checkpointing"].update(run_name=run, base_output_directory="gs://ckpt/runs")
    data["bucket"]["name"] = "ckpt"  # the output must be in the run's bucket (core.definition.description.spec, issue 33 item 13)
    data["checkpointing"].update(changes.pop("checkpointing", {}))
    return {**data, **changes}


def _upload(name: str, data: bytes = b"") -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    storage.Client(project="mtc-test", credentials=AnonymousCredentials()).bucket("ckpt").blob(name) \
        .upload_from_string(data)


def _backup(run: str, folder: str, step: int, node: int, data: bool = True) -> None:
    """One node's replicator backup of `step`: its data folder first, then the `.meta` naming it (as the rehearsal's
    replicator writes them: rehearsal/mtc_local/runner/replicator.py)."""
    if data:
        _upload(f"{run}/{folder}/D{step}n{node}.data/manifest.ocdbt", b"ocdbt")
    _upload(f"{run}/{folder}/{run}-s{step}-n{node}-w0.meta", b'{"data": "D%dn%d.data"}' % (step, node))


def _trigger(config, clock: _Clock, core=None, reported: bool = True) -> JobSetTrigger:
    """The launch task's trigger as the operator builds it from the plan: the one stall rule (core.definition.description.run.stall_rule)."""
    limit, cadence, _ = stall_rule(config, reported=reported)
    trigger = JobSetTrigger(connection={"kind": "gke", "cluster_url": "https://gke.invalid"}, namespace="default",
                            name="train", checkpoint_dir=config.checkpointing.checkpoint_directory,
                            gcp_conn_id=GCS_CONN_ID, backup_dir=replicator_backup_dir(config.checkpointing),
                            backup_nodes=config.slices.num_slices * config.slices.hosts_per_slice,
                            watch=WatchSettings(times=WatchTimes(progress_interval=None),
                                                pod_logs=PodLogs(enabled=core is not None, interval=30.0),
                                                stall_timeout=limit, stall_cadence=cadence, push_progress=False))
    trigger.clock = clock
    if core is not None:  # the leader's log through the real client against the API double
        trigger._follower = LeaderLogFollower(KubernetesPodLogs(factory(core)), "default", "train", clock=clock)
    return trigger


async def _train(trigger, clock, core, start, minutes, step, run, period=1000, log=True):
    """`minutes` of training, one minute at a time: the leader's step lines, a persistent save every `period`."""
    for _ in range(minutes):
        clock.now += 60
        new = step + int(60 / STEP_S)
        if log:
            core.write_log("train-slice-0-0-aaaaa", *[f"completed step: {s}, seconds: {STEP_S:.3f}, loss: 2.000"
                                                       for s in range(step + 1, new + 1)])
        for saved in range((step // period + 1) * period, new + 1, period):
            _upload(f"runs/{run}/checkpoints/{saved}/commit_success.txt")
        step = new
        await trigger.follow_pod_logs()
        reason = await trigger.check_stall(RUNNING)
        if reason:
            return step, reason
    return step, None


async def test_rare_persistent_saves_with_the_leaders_lines_never_stall(gcs, core):
    """(a) Persistent saves every ~38 min, a step line every 2.3 s: no stall in 4 hours (today: deleted at 30 min,
    as only `commit_success.txt` steps counted and the limit was 1800 s whatever the cadence)."""
    run = "cadence-a"
    clock = _Clock()
    trigger = _trigger(parse_run(_description(run)), clock, core)
    assert await trigger.check_stall(RUNNING) is None  # the clock starts (pods started)
    step, reason = await _train(trigger, clock, core, clock.now, 240, 0, run)
    assert reason is None, reason
    assert step > 6000
    figures = trigger.stall.signal.figures()
    assert figures["alive_source"] == "workload-log" and figures["alive_step"] == step
    assert figures["restorable_source"] == "checkpoints" and figures["restorable_step"] == 6000
    # the run's ledger keeps what the watch read: the leader's steps with loss and step time, the persistent saves
    ledger = trigger.facts().ledger
    assert ledger.steps[-1].to_list()[1:] == [step, 2.0, round(STEP_S, 3)] and len(ledger.steps) <= 2000
    assert [s.step for s in ledger.saves if s.tier == "persistent"] == list(range(1000, 6001, 1000))


async def test_the_leaders_lines_stopping_is_a_stall_after_the_derived_limit(gcs, core):
    """(b) The same run hangs after an hour: the lines stop, so does everything; stalled after the derived limit
    (3 x the step time seen, at least the 1800 s floor), not after the next persistent save was due."""
    run = "cadence-b"
    clock = _Clock()
    trigger = _trigger(parse_run(_description(run)), clock, core)
    await trigger.check_stall(RUNNING)
    step, reason = await _train(trigger, clock, core, clock.now, 60, 0, run)
    assert reason is None
    assert trigger.stall.limit()[0] == 1800  # 3 x 2.3 s is below the floor
    hung_at = clock.now
    _, reason = await _train(trigger, clock, core, clock.now, 29, step, run, log=False, period=10**9)
    assert reason is None  # 29 minutes of silence: still within the limit
    _, reason = await _train(trigger, clock, core, clock.now, 2, step, run, log=False, period=10**9)
    assert reason is not None and clock.now - hung_at <= 31 * 60
    assert "stall limit 1800s" in reason and f"step {step} (reported by the leader's log)" in reason
    assert "newest finalized step 1000" in reason


async def test_without_the_leaders_lines_the_limit_is_measured_against_the_saves(gcs, core):
    """Pod logs off and the step time given: only saves are seen, so the limit is 3 x their gap (~1.9 h)."""
    run = "cadence-nolog"
    clock = _Clock()
    trigger = _trigger(parse_run(_description(run, step_seconds=STEP_S)), clock, reported=False)
    await trigger.check_stall(RUNNING)
    step, reason = await _train(trigger, clock, core, clock.now, 180, 0, run, log=False)
    assert reason is None, reason
    limit, why = trigger.stall.limit()
    # the step time seen between saves (minute-grained here), else the given step_seconds
    assert limit == pytest.approx(3 * 1000 * STEP_S, rel=0.05) and "checkpoint_period 1000" in why


async def test_multi_tier_progresses_from_replicator_backups_and_the_attempt_end_sees_it(gcs):
    """(c) Multi-tier mode: no persistent step ever (MaxText writes none: docs/maxtext.md), the replicator backs up
    every 30 minutes as `<bucket>/<job>/<time>/<job>-s<step>-n<node>-w<worker>.meta` (the layout
    core.measure.progress.replicator_backup_dir cites). No stall in 3 hours; the end of the attempt decides on the newest
    backup, so an attempt that trained is a retry, not a crash loop."""
    run = "cadence-c"
    config = parse_run(_description(run, checkpointing={
        "enable_emergency_checkpoint": False, "enable_multi_tier_checkpointing": True,
        "multi_tier_checkpointing_backup_interval_minutes": 30}))
    clock = _Clock()
    trigger = _trigger(config, clock, reported=False)
    await trigger.check_stall(RUNNING)
    step = 0
    for minute in range(1, 181):
        clock.now += 60
        step += int(60 / STEP_S)
        if minute % 30 == 0:
            for node in range(16):  # every host of 2 slices of 4x8: <bucket>/<job>/<time>/<job>-s<step>-n<node>-w0.meta
                _backup(run, f"2026-12-02_{minute // 60:02d}-{minute % 60:02d}", step, node)
        assert await trigger.check_stall(RUNNING) is None, minute
    assert replicator_backup_dir(config.checkpointing) == f"gs://ckpt/{run}"  # the bucket's root, not runs/
    restorable = trigger.stall.signal.restorable
    assert restorable.source == "replicator-backup" and restorable.step == step
    assert [(s.tier, s.complete) for s in trigger.facts().ledger.saves] == [("replicator", True)] * 6  # the ledger's
    # What triggers.attempt_end (and a resubmission) decides on: the same call, the same listing.
    latest = (await trigger.newest_checkpoints()).restorable().step
    assert latest == step
    ended = JobSetState("train", "default", "succeeded")  # preempted: MaxText saved and exited 0
    decision = decide(ended, latest, config.checkpointing.steps - 1, [None, None], 2)
    assert decision.kind == RETRY, decision.reason


def test_the_workers_end_of_attempt_reads_the_same_restorable_step(gcs):
    """The worker's decision (MtcJobSetOperator._latest) and the step history use adapters' list_newest: in
    multi-tier mode the newest replicator backup complete on every node, else the newest persistent checkpoint."""
    from mtc_provider.adapters.checkpoint_stores import GcsCheckpointStore, list_newest

    _upload("runs/cadence-w/checkpoints/100/commit_success.txt")
    for node in range(2):
        _backup("cadence-w", "2026-12-02_10-00", 250, node)
    store, checkpoints = GcsCheckpointStore(GCS_CONN_ID), "gs://ckpt/runs/cadence-w/checkpoints"
    assert list_newest(store, checkpoints).restorable().step == 100
    assert list_newest(store, checkpoints, None, "gs://ckpt/cadence-w", nodes=2).restorable().step == 250
    # A third node's backup is missing: 250 is not restorable on a 3-host run.
    assert list_newest(store, checkpoints, None, "gs://ckpt/cadence-w", nodes=3).restorable().step == 100


async def test_only_complete_backups_of_this_run_count_at_the_attempt_end(gcs):
    """A step the replicator has not finished backing up on every node, a torn or dangling `.meta`, another job's
    backup sharing the prefix (`cadence-p-2`) and this run's name in another folder of the bucket are not what a new
    start can restore (core.measure.listing.complete_backups; the replicator's layout: facts in
    core.measure.progress.replicator_backup_dir). Only step 60, backed up whole by all 8 nodes, is restorable; the
    attempt's end decides on it, so a run whose target is 80 is not SUCCEEDED by a partial backup of 80."""
    run = "cadence-p"
    config = parse_run(_description(run, slices={"tpu_type": "v6e", "topology": "4x4", "num_slices": 2,
                                                 "machine_type": "ct6e-standard-4t"},
                                    checkpointing={"enable_emergency_checkpoint": False,
                                                   "enable_multi_tier_checkpointing": True,
                                                   "multi_tier_checkpointing_backup_interval_minutes": 30}))
    nodes = config.slices.num_slices * config.slices.hosts_per_slice
    assert nodes == 8  # 2 slices of 4 hosts
    for node in range(nodes):
        _backup(run, "2026-12-06_10-00", 60, node)
    _backup(run, "2026-12-06_10-30", 80, 0)  # an upload in progress: 1 of 8 nodes
    for node in range(nodes):
        _backup(f"{run}-2", "2026-12-06_10-40", 90, node)  # another job whose name starts with this one's
        _upload(f"{run}/2026-12-06_10-40/{run}-2-s90-n{node}-w0.meta", b"{}")  # ...even inside this run's folder
        _upload(f"{run}/2026-12-06_10-40/D90n{node}.data/manifest.ocdbt", b"ocdbt")
        _backup(f"old/{run}", "2026-12-06_10-45", 95, node)  # the same run name in another folder of the bucket
        _upload(f"{run}/{run}-s96-n{node}-w0.meta", b"{}")  # not in a time folder
        _backup(run, "copied-by-hand", 97, node)  # a folder the replicator does not write
        _upload(f"{run}/D96n{node}.data/manifest.ocdbt", b"ocdbt")
    for node in range(nodes - 1):
        _backup(run, "2026-12-06_10-50", 100, node)
    _upload(f"{run}/2026-12-06_10-50/D100n{nodes - 1}.data/manifest.ocdbt", b"ocdbt")
    _upload(f"{run}/2026-12-06_10-50/{run}-s100-n{nodes - 1}-w0.meta")  # torn: an empty .meta
    for node in range(nodes):
        _backup(run, "2026-12-06_11-00", 110, node, data=node != 2)  # dangling: node 2's data is gone
    trigger = _trigger(config, _Clock(), reported=False)
    assert trigger.backup_nodes == nodes
    latest = (await trigger.newest_checkpoints()).restorable()
    assert latest is not None and latest.step == 60, latest
    failed = JobSetState("train", "default", "failed")
    decision = decide(failed, latest.step, 80, [None, None], 2)
    assert decision.kind != SUCCEED, decision


async def _attempt_restoring(trigger, clock, core, restores: list[int]) -> JobSetEvent:
    """One attempt at the guide's cadence whose pods start once per entry of `restores` (the first start, then an
    in-cluster restart after each host loss), each restoring that step from the ramdisk: MaxText logs `restoring
    from this run's directory step N` before training (core.measure.step_log.RESTORE_LINE), then trains 10 steps
    with local saves only; no persistent step ever comes (checkpoint_period 1000). The JobSet then fails: its
    restarts are used up."""
    for restored in restores:
        clock.now += 60
        core.write_log("train-slice-0-0-aaaaa", f"restoring from this run's directory step {restored}",
                       *[f"completed step: {s}, seconds: {STEP_S:.3f}, loss: 2.000"
                         for s in range(restored + 1, restored + 11)])
        await trigger.follow_pod_logs()
    failed = JobSetState("train", "default", "failed", reason="BackoffLimitExceeded", retryable=True,
                         restarts=len(restores) - 1)
    return JobSetEvent.from_payload(trigger.event("ended", failed, failed.restarts).payload)


async def test_a_run_restoring_newer_ramdisk_steps_after_host_losses_is_no_crash_loop(gcs, core):
    """Six host losses 10 steps apart between persistent saves (local saves every 5 steps): each start restores a
    newer step from the ramdisk, so the run trains although no finalized checkpoint exists. The trigger reads the
    restores from the leader's log; the attempt's end counts them as restorable progress (an in-try resubmission,
    not a crash loop); the next attempt starts from the step restored last; starts that restore no newer step are a
    crash loop after `crash_loop_attempts` attempts."""
    run = "cadence-r"
    config = parse_run(_description(run))
    clock = _Clock()
    trigger = _trigger(config, clock, core)
    ev = await _attempt_restoring(trigger, clock, core, [0, 5, 15, 25])
    assert ev.restored_step == 25 and (await trigger.newest_checkpoints()).restorable() is None
    history = [None]
    decision = decide(ev.state, None, config.checkpointing.steps - 1, history, 2, ev.restored_step)
    assert decision.kind == RETRY and resubmit_in_try(decision, history, restorable_progress(None, ev.restored_step))
    # even with a guard of one attempt: the restores are progress
    assert decide(ev.state, None, 99, history, 1, ev.restored_step).kind == RETRY
    end = end_of_attempt(decision, jobset="train", namespace="default", attempt=1, restarts=3, latest=None,
                         history=history, phase_succeeded=False, try_number=1, max_tries=2, target_step=99,
                         last_try=False, restored=ev.restored_step)
    assert end.in_try and end.last_step == 25 and "resumes from step 25" in end.line, end.line
    # The next attempt starts from what the last one restored, not from "no checkpoint".
    ended_first = {"attempt": 1, "end": clock.now, "last_step": end.last_step}
    plan = plan_launch([], history, None, 99, records=[ended_first])
    assert plan.kind == SUBMIT and plan.start_step == 25 and list(plan.history) == [None, 25]

    second = _trigger(config, clock, core)
    ev = await _attempt_restoring(second, clock, core, [25, 35, 45])
    decision = decide(ev.state, None, 99, list(plan.history), 2, ev.restored_step)
    assert decision.kind == RETRY and ev.restored_step == 45

    # A crash loop: every start restores step 45 again.
    for attempt, history in ((3, [None, 25, 45]), (4, [None, 25, 45, 45])):
        looping = _trigger(config, clock, core)
        ev = await _attempt_restoring(looping, clock, core, [45, 45])
        decision = decide(ev.state, None, 99, history, 2, ev.restored_step)
        assert (decision.kind == FAIL) == (attempt == 4), (attempt, decision)
    assert "crash loop: no restorable progress across 2 consecutive attempts" in decision.reason
    assert "newest restored step 45" in decision.reason


async def test_the_local_workloads_restore_events_of_this_watch_are_restorable_progress(tmp_path):
    """On the local target the workload's own `restore` events say what each start of the pods resumed from (the
    leader's log says it on a cluster): the newest one since this watch began counts; an older attempt's does not."""
    import time

    from mtc_provider.adapters.workload_events import append_event

    events = tmp_path / "run" / "events" / "process-0.jsonl"
    events.parent.mkdir(parents=True)
    append_event(events, event="restore", step=40, tier="local", ts=time.time() - 3600)  # the previous attempt's
    trigger = JobSetTrigger(connection={"kind": "local", "home": str(tmp_path)}, namespace="default", name="train",
                            checkpoint_dir=str(tmp_path / "run" / "checkpoints"))
    trigger._watch_since = time.time()
    await trigger.read_restores()
    assert trigger.restored_step is None
    for step in (12, 18, 16):
        append_event(events, event="restore", step=step, tier="local", ts=time.time())
        await trigger.read_restores()
    assert trigger.restored_step == 18  # the newest step restored, not the newest restore


# ---------------------------------------------------------------------------------------------------------------
# The first-step limit of each start of the pods, and restorable progress while steps are reported.


LEADER = "train-slice-0-0-aaaaa"


def _new_leader(trigger, clock, core) -> None:
    """An in-cluster restart: the JobSet controller replaces every pod; the new leader's log starts empty (the
    replacement pod keeps the name here, so the helpers above keep writing to it)."""
    trigger._new_start_of_pods()
    core.logs.pop(LEADER, None)
    trigger._follower = LeaderLogFollower(KubernetesPodLogs(factory(core)), "default", "train", clock=clock)


async def _silent(trigger, clock, minutes: int) -> tuple[int, str | None]:
    """`minutes` in which the pods run but log no step (a restore, a compile, or a hang): (minutes waited, reason)."""
    for minute in range(1, minutes + 1):
        clock.now += 60
        await trigger.follow_pod_logs()
        reason = await trigger.check_stall(RUNNING)
        if reason:
            return minute, reason
    return minutes, None


async def test_a_hang_before_the_first_step_of_a_restart_is_flagged_after_the_first_step_limit(gcs, core):
    """The first start takes 20 min to its first step (restore and compile), trains an hour, loses a host; the new
    pods hang before any step. Flagged after 3 x 20 min (the attempt's measured time to first step), not after
    3 x the persistent gap (today: ~6,900 s at checkpoint_period 1000 and 2.3 s a step; ~19 h at 10000)."""
    run = "cadence-first"
    clock = _Clock()
    trigger = _trigger(parse_run(_description(run, step_seconds=STEP_S)), clock, core)
    assert await trigger.check_stall(RUNNING) is None  # the pods run
    waited, reason = await _silent(trigger, clock, 20)
    assert reason is None  # the very first start: no step reported yet in this attempt, today's rule
    step, reason = await _train(trigger, clock, core, clock.now, 60, 0, run)
    assert reason is None, reason
    assert trigger.stall.first_steps.measured == [pytest.approx(21 * 60, abs=60)]  # read with the first minute's lines
    _new_leader(trigger, clock, core)
    limit, why = trigger.stall.first_step_limit()
    assert limit == pytest.approx(3 * 21 * 60, abs=180) and "longest time to the first step" in why
    waited, reason = await _silent(trigger, clock, 240)
    assert reason is not None and limit / 60 < waited <= limit / 60 + 2, (waited, reason)
    assert f"first-step limit {limit:.0f}s" in reason and "without reporting a step" in reason, reason


async def test_a_start_slow_to_its_first_step_within_the_floor_is_fine_and_raises_the_next_limit(gcs, core):
    """Starts that reach their first step within the limit are never flagged: the first after 5 min, the second
    after 29 min (inside the 1800 s first_step_floor, although 3 x 5 min is 15 min). The third start may then take
    3 x 29 min, the longest measured, before it counts as hung."""
    run = "cadence-floor"
    clock = _Clock()
    trigger = _trigger(parse_run(_description(run, step_seconds=STEP_S)), clock, core)
    await trigger.check_stall(RUNNING)
    assert (await _silent(trigger, clock, 5))[1] is None
    step, reason = await _train(trigger, clock, core, clock.now, 30, 0, run)
    assert reason is None, reason
    _new_leader(trigger, clock, core)
    assert trigger.stall.first_step_limit()[0] == 1800 and "first_step_floor 1800" in trigger.stall.first_step_limit()[1]
    assert (await _silent(trigger, clock, 28))[1] is None
    step, reason = await _train(trigger, clock, core, clock.now, 30, step, run)
    assert reason is None, reason
    _new_leader(trigger, clock, core)
    limit, _ = trigger.stall.first_step_limit()
    assert limit == pytest.approx(3 * 29 * 60, abs=180)
    waited, reason = await _silent(trigger, clock, 200)
    assert reason is not None and limit / 60 < waited <= limit / 60 + 2, (waited, reason)


async def test_steps_reported_while_nothing_restorable_is_saved_is_a_stall(gcs, core):
    """A workload that logs a step every 2.3 s but never writes a checkpoint (its saves fail, or go nowhere a
    restart reads): stalled once nothing restorable came for 3 x its persistent gap at the step time seen
    (checkpoint_period 1000: ~1.9 h), although its steps keep coming (today: never; 24 h observed)."""
    run = "cadence-nosave"
    clock = _Clock()
    trigger = _trigger(parse_run(_description(run)), clock, core)
    await trigger.check_stall(RUNNING)
    step, reason = await _train(trigger, clock, core, clock.now, 600, 0, run, period=10**9)
    limit, why = trigger.stall.save_limit()
    assert limit == pytest.approx(3 * 1000 * 60 / int(60 / STEP_S), rel=0.01) and "checkpoint_period 1000" in why
    assert reason is not None and limit < 60 * (step // int(60 / STEP_S)) <= limit + 120, (step, reason)
    assert "steps are reported" in reason and "nothing restorable was saved for" in reason, reason
    assert f"limit {limit:.0f}s" in reason


async def test_saves_on_cadence_and_restores_of_newer_steps_are_never_a_stall(gcs, core):
    """Six hours at the guide's cadence, a host lost every ~1.5 h: persistent saves every 1000 steps keep the run
    alive; a second run that saves no persistent step but whose every start restores a newer step from the ramdisk
    (MaxText's restore line) makes restorable progress too."""
    run = "cadence-saves"
    clock = _Clock()
    trigger = _trigger(parse_run(_description(run)), clock, core)
    await trigger.check_stall(RUNNING)
    step = 0
    for restart in range(4):
        step, reason = await _train(trigger, clock, core, clock.now, 90, step, run)
        assert reason is None, (restart, reason)
        _new_leader(trigger, clock, core)
        step = step // 1000 * 1000  # the new start resumes from the newest persistent checkpoint
        core.write_log(LEADER, f"restoring from this run's directory step {step}")
    assert trigger.stall.saves.step >= 5000

    run = "cadence-local"
    clock = _Clock()
    core.logs.pop(LEADER, None)  # another run's leader
    trigger = _trigger(parse_run(_description(run)), clock, core)
    await trigger.check_stall(RUNNING)
    step = 0
    for restart in range(3):  # 5 h without a persistent save: 3 x its gap (~1.9 h) passes twice
        step, reason = await _train(trigger, clock, core, clock.now, 100, step, run, period=10**9)
        assert reason is None, (restart, reason)
        _new_leader(trigger, clock, core)
        step -= 3  # the ramdisk's newest local save
        core.write_log(LEADER, f"restoring from this run's directory step {step}")
        assert (await _silent(trigger, clock, 1))[1] is None
    assert trigger.restored_step == step and trigger.stall.saves.how == "restored by a start of the pods"
