"""The stall limit derived from the run's cadence, and its plan-time check (issue 32; core.measure.cadence, core.definition.description.run).

The cadence is the guide's (examples/gke-v6e.yaml: a persistent checkpoint every 1000 steps, ~2.28 s a step for
Llama-2-70B on v6e at MaxText's published ~900 tokens/s per device: one every ~38 minutes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mtc_provider.core.measure.cadence import STALL_FACTOR, check_stall_timeout, run_cadence
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.measure.progress import PERSISTENT, REPLICATOR, REPORTED_LOG, ProgressSignal
from mtc_provider.core.definition.description.run import checkpoint_stall_timeout, parse_run, run_plan, stall_rule

REPO = Path(__file__).resolve().parents[2]
STEP_S = 2048 / 900


def _v6e(**top) -> dict:
    data = yaml.safe_load((REPO / "examples/gke-v6e.yaml").read_text())
    return {**data, **top}


def test_the_default_is_derived_from_the_cadence_not_a_constant():
    limit, cadence, warnings = stall_rule(parse_run(_v6e()))
    assert (limit, warnings) == (1800.0, [])  # the leader's lines every step: the floor (compile + restore)
    assert [s["source"] for s in cadence["signals"]] == [REPORTED_LOG, PERSISTENT]
    # Without the leader's lines, only the saves show progress: 3 x their gap once the step time is known.
    config = parse_run(_v6e(step_seconds=STEP_S))
    limit, _, _ = stall_rule(config, reported=False)
    assert limit == pytest.approx(STALL_FACTOR * 1000 * STEP_S)
    assert checkpoint_stall_timeout(config, 1800.0) == pytest.approx(STALL_FACTOR * 1000 * STEP_S)
    assert checkpoint_stall_timeout(parse_run(_v6e()), 1800.0) is None  # gap unknown: the sensor judges no stall


def test_an_explicit_stall_timeout_shorter_than_every_signal_is_refused_naming_the_field():
    """(d) Measured against persistent saves only (pod logs off): 1800 s < the 2276 s between checkpoints."""
    config = parse_run(_v6e(stall_timeout=1800, step_seconds=STEP_S))
    with pytest.raises(SpecError) as err:
        run_plan(config, "/tmp/unused", reported=False)
    assert err.value.field == "stall_timeout" and err.value.value == 1800
    assert "persistent checkpoints every 2276 s (checkpointing.checkpoint_period 1000 x step_seconds 2.28)" \
        in str(err.value)
    assert "or empty for the derived limit 6827 s" in str(err.value)
    with pytest.raises(SpecError, match=r"stall_timeout: 1 is not allowed.*the leader's step lines every 2.28 s "
                                        r"\(one a step, step_seconds 2.28\)"):
        parse_run(_v6e(stall_timeout=1, step_seconds=STEP_S))


def test_mtc_plan_warns_when_stall_timeout_holds_only_while_the_leaders_lines_are_read(tmp_path):
    """(d) `mtc plan` shows the warning: field, value, the computed gap."""
    from mtc_provider.cli.app import app

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(_v6e(stall_timeout=1800, step_seconds=STEP_S)))
    result = CliRunner().invoke(app, ["plan", str(path), "--project-number", "123456789012"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the console may wrap the line
    assert "stall_timeout 1800 s is shorter than the gap between the checkpoints a resubmission resumes from " \
           "(persistent checkpoints every 2276 s (checkpointing.checkpoint_period 1000" in text


def test_multi_tier_is_measured_against_replicator_backups():
    config = parse_run(_v6e(checkpointing={
        **_v6e()["checkpointing"], "enable_emergency_checkpoint": False, "enable_multi_tier_checkpointing": True,
        "multi_tier_checkpointing_backup_interval_minutes": 30}))
    cadence = run_cadence(config.checkpointing, "gke", reported=False)
    assert [s.source for s in cadence.signals] == [REPLICATOR]  # MaxText writes no persistent step in this mode
    assert cadence.stall_limit() == 3 * 1800.0
    with pytest.raises(SpecError, match=r"replicator backups every 1800 s \(checkpointing.multi_tier_checkpointing_"
                                        r"backup_interval_minutes 30 min\)"):
        check_stall_timeout(1200, cadence)


def test_the_local_workloads_step_time_is_known_up_front(tmp_path):
    config = parse_run({"target": "local", "slices": {"tpu_type": "v5p", "num_slices": 2},
                        "checkpointing": {"run_name": "r", "steps": 100, "checkpoint_period": 2000},
                        "workload": {"extra_flags": {"step_time_ms": 150}}}, str(tmp_path))
    limit, cadence, _ = stall_rule(config)
    assert cadence["step_seconds"] == 0.15 and limit == 120.0  # the events every step: the local floor
    assert stall_rule(config, reported=False)[0] == pytest.approx(3 * 2000 * 0.15)


def test_one_signal_alive_from_any_source_restorable_from_saves_only():
    signal = ProgressSignal(started_at=0.0)
    assert signal.observe(1000, PERSISTENT, 10.0)
    assert signal.observe(1040, REPORTED_LOG, 100.0)
    assert not signal.observe(1040, REPORTED_LOG, 200.0)  # the same line again: no progress
    assert (signal.alive.step, signal.alive.source) == (1040, REPORTED_LOG)
    assert (signal.restorable.step, signal.restorable.source) == (1000, PERSISTENT)
    assert signal.seconds_without_progress(250.0) == 150.0
    signal.new_start()  # an in-cluster restart: the leader reports from the restored step again
    assert signal.observe(1001, REPORTED_LOG, 300.0)
    assert signal.observe(1100, REPLICATOR, 400.0)
    assert signal.figures() == {"alive_step": 1100, "alive_source": REPLICATOR, "restorable_step": 1100,
                                "restorable_source": REPLICATOR}
    with pytest.raises(ValueError, match="source 'guess'"):
        signal.observe(1, "guess", 0.0)


def test_the_launch_operator_uses_the_same_rule(tmp_path):
    """MtcJobSetOperator checks an explicit stall_timeout and derives "derived" with core.measure.cadence, before any call."""
    from airflow.sdk.exceptions import AirflowFailException

    from tests.support.js_helpers import launch

    workload = {"jobset_name": "train", "max_restarts": 2, "extra_flags": {"step_time_ms": 2000}}
    op = launch(str(tmp_path), workload=workload, stall_timeout=1)  # the events every 2 s: 1 s is too short
    with pytest.raises(AirflowFailException, match=r"stall_timeout: 1 is not allowed.*the workload's step events "
                                                   r"every 2 s"):
        op._specs()
    op = launch(str(tmp_path), workload=workload, stall_timeout="derived")
    op._specs()
    assert op._options.stall_timeout == 120.0 and op._options.stall_cadence["step_seconds"] == 2.0
    op = launch(str(tmp_path), workload=workload, stall_timeout="soon")
    with pytest.raises(AirflowFailException, match=r"stall_timeout: 'soon' is not allowed; allowed: a positive"):
        op._specs()


def test_the_first_step_limit_is_three_times_the_slowest_earlier_start_at_least_the_floor():
    from mtc_provider.core.measure.cadence import FIRST_STEP_FLOOR_S, first_step_limit

    assert FIRST_STEP_FLOOR_S == 1800.0  # the documented default of first_step_floor
    limit, why = first_step_limit([], 1800.0)
    assert limit == 1800.0 and "no earlier start" in why
    limit, why = first_step_limit([300.0, 90.0], 1800.0)  # 3 x 300 s is below the floor
    assert limit == 1800.0 and why.startswith("first_step_floor 1800 s") and "300 s; measured: 300, 90 s" in why
    limit, why = first_step_limit([300.0, 1200.0, 600.0], 1800.0)  # the longest, not the newest
    assert limit == 3600.0 and "(1200 s;" in why and "above first_step_floor 1800 s" in why


def test_each_start_measures_its_time_to_the_first_step_from_its_pods_running():
    from mtc_provider.core.measure.progress import FirstSteps

    first = FirstSteps()
    assert first.step(5.0) is None and first.ever_stepped  # a step before the pods were seen running: no figure
    first.new_start()
    first.running(100.0)
    first.running(150.0)  # said again: the first time counts
    assert first.waiting(400.0) == 300.0
    assert first.step(700.0, at=640.0) == 540.0  # when the line was written, not when it was read
    assert first.step(760.0) is None and first.waiting(800.0) is None  # later steps: no new figure
    first.new_start()
    assert first.waiting(900.0) is None  # new pods, not running yet
    first.running(1000.0)
    assert first.waiting(1100.0) == 100.0 and first.measured == [540.0]


def test_restorable_progress_is_a_newer_save_or_a_newer_restored_step():
    from mtc_provider.core.measure.progress import RestorableClock

    saves = RestorableClock(started_at=1000.0)
    assert saves.observe(400, 1000.0, "persistent checkpoint", at=10.0)  # an older attempt's: the clock starts now
    assert saves.seconds_without_progress(1600.0) == 600.0
    assert not saves.observe(400, 1700.0, "restored by a start of the pods")  # the same step again: no progress
    assert saves.observe(450, 1800.0, "restored by a start of the pods")
    assert saves.seconds_without_progress(2000.0) == 200.0 and saves.how == "restored by a start of the pods"
    saves.pause(500.0)  # the pods waited for capacity: no saves could come
    assert not saves.stalled(2500.0, 250.0) and saves.stalled(2551.0, 250.0)


def test_the_save_limit_is_three_restorable_gaps_and_unknown_without_a_step_time():
    cadence = run_cadence(parse_run(_v6e()).checkpointing, "gke", reported=True)
    assert cadence.save_limit() is None  # no step time yet: the gap of 1000 steps is unknown
    limit, why = cadence.save_limit(STEP_S)
    assert limit == pytest.approx(STALL_FACTOR * 1000 * STEP_S) and "checkpoint_period 1000" in why
    config = parse_run(_v6e(checkpointing={**_v6e()["checkpointing"], "enable_checkpointing": False,
                                               "enable_emergency_checkpoint": False}))
    assert run_cadence(config.checkpointing, "gke").save_limit(STEP_S) is None  # nothing restorable is saved


def test_first_step_floor_is_an_option_the_trigger_gets(tmp_path):
    from mtc_provider.core.attempt.launch_options import LaunchOptions, WatchSettings

    config = parse_run({"target": "local", "slices": {"tpu_type": "v5p", "num_slices": 2},
                        "checkpointing": {"run_name": "r", "steps": 100, "checkpoint_period": 20}}, str(tmp_path))

    def parse(**fields):
        return LaunchOptions.parse({"stall_timeout": "derived", **fields}, default_target_step=100, kind="local",
                                   checkpointing=config.checkpointing, workload=config.workload)[0]

    assert parse().watch().times.first_step_floor == 1800.0
    watch = parse(first_step_floor="600").watch()  # a rendered template is text
    assert WatchSettings.from_dict(watch.to_dict()).times.first_step_floor == 600.0
    old = watch.to_dict()
    del old["times"]["first_step_floor"]  # a record serialized before the option existed
    assert WatchSettings.from_dict(old).times.first_step_floor == 1800.0
    for bad in (0, -5, "soon", None, True):
        with pytest.raises(SpecError) as err:
            parse(first_step_floor=bad)
        assert err.value.field == "first_step_floor" and "a positive number of seconds" in str(err.value)
