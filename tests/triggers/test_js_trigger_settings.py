"""The launch trigger's settings: the operator's options as one serializable record (core.attempt.launch_options
WatchSettings), through Airflow's trigger table as JSON. Airflow stores `serialize()`'s kwargs in its trigger table
and rebuilds the trigger with them in the triggerer (Airflow docs, "Deferrable Operators & Triggers": "serialize ...
returns the classpath and keyword arguments ... to re-construct the trigger", which must be JSON-serializable)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import yaml

from mtc_provider.core.attempt.launch_options import LaunchOptions, WatchSettings
from mtc_provider.core.definition.description.run import parse_run
from mtc_provider.triggers.jobset import JobSetTrigger

CONNECTION = {"kind": "local", "home": "/nonexistent/mtc-home"}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local.yaml"
# Every option away from its default, as a rendered template gives some of them (text).
GIVEN = {"target_step": 40, "crash_loop_attempts": 2, "poll_interval": "7", "stall_timeout": "derived",
         "startup_timeout": 123, "image_pull_timeout": 456, "capacity_log_interval": 11, "listing_timeout": 22,
         "progress_interval": 33, "pod_logs": "false", "pod_logs_interval": 44, "pod_logs_max_lines": 55,
         "pod_logs_max_bytes": 666, "deletion_timeout": 77, "api_outage_timeout": 88, "keep_failed_attempts": 1}


@pytest.fixture(scope="module")
def options(tmp_path_factory) -> LaunchOptions:
    config = parse_run(yaml.safe_load(EXAMPLE.read_text()), str(tmp_path_factory.mktemp("home")))
    parsed, _ = LaunchOptions.parse(GIVEN, default_target_step=config.checkpointing.steps, kind="local",
                                    checkpointing=config.checkpointing, workload=config.workload)
    return parsed


def test_the_trigger_takes_the_options_record_with_at_most_15_parameters():
    named = [p for p in inspect.signature(JobSetTrigger.__init__).parameters.values()
             if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    assert len(named) <= 15 and "watch" in {p.name for p in named}


def test_the_options_reach_the_triggerer_through_json(options):
    trigger = JobSetTrigger(connection=CONNECTION, namespace="default", name="train", watch=options.watch())
    classpath, kwargs = trigger.serialize()
    stored = json.loads(json.dumps(kwargs, allow_nan=False))  # the trigger table's JSON column
    again = JobSetTrigger(**stored)
    assert again.serialize() == (classpath, kwargs)
    assert WatchSettings.from_dict(stored["watch"]) == options.watch()
    # Each option as the watch reads it, the same in the triggerer as in the worker.
    times, logs = again.watch.times, again.watch.pod_logs
    assert (times.poll_interval, times.startup_timeout, times.image_pull_timeout, times.capacity_log_interval,
            times.listing_timeout, times.progress_interval, times.deletion_timeout, times.api_outage_timeout) == (
        7.0, 123.0, 456.0, 11.0, 22.0, 33.0, 77.0, 88.0)
    assert (logs.enabled, logs.interval, logs.max_lines, logs.max_bytes) == (False, 44.0, 55, 666)
    assert (again.watch.stall_timeout, again.watch.stall_cadence) == (options.stall_timeout, options.stall_cadence)
    assert options.stall_cadence and options.stall_timeout > 0  # "derived": the trigger re-derives from the cadence
    assert not any("token" in key.lower() or "password" in key.lower() for key in json.dumps(stored).split('"'))


# The kwargs JobSetTrigger.serialize() wrote in release 0.1.0 (CHANGELOG [0.1.0]; the serialize() before commit
# 46e34ad): a task deferred on 0.1.0 is rebuilt from this row by a triggerer upgraded under it.
ROW_0_1 = {"connection": CONNECTION, "namespace": "default", "name": "run-a1", "resource_version": "5",
           "restarts_seen": 1, "poll_interval": 7.0, "checkpoint_dir": "/ckpt", "stall_timeout": 600.0,
           "delete_on_kill": True, "extra": {"attempt": 1}, "gcp_conn_id": None, "impersonation_chain": None,
           "startup_timeout": 123.0, "capacity_log_interval": 11.0, "listing_timeout": 22.0, "progress_interval": 33.0,
           "api_outage_timeout": 88.0, "api_outage_log_interval": 5.0, "api_backoff_max": 9.0, "request_timeout": 12.0,
           "image_pull_timeout": 456.0, "pod_logs": True, "pod_logs_interval": 44.0, "pod_logs_max_lines": 55,
           "pod_logs_max_bytes": 666, "push_progress": False, "stall_cadence": {"save_interval_steps": 10},
           "backup_dir": None}


def test_a_row_serialized_by_release_0_1_loads_with_its_settings():
    trigger = JobSetTrigger(**json.loads(json.dumps(ROW_0_1)))
    watch = trigger.watch
    assert (watch.times.poll_interval, watch.times.startup_timeout, watch.times.image_pull_timeout,
            watch.times.capacity_log_interval, watch.times.listing_timeout, watch.times.progress_interval,
            watch.times.api_outage_timeout) == (7.0, 123.0, 456.0, 11.0, 22.0, 33.0, 88.0)
    assert (watch.pod_logs.enabled, watch.pod_logs.interval, watch.pod_logs.max_lines,
            watch.pod_logs.max_bytes) == (True, 44.0, 55, 666)
    assert (watch.pacing.log_interval, watch.pacing.backoff_max, watch.pacing.request_timeout) == (5.0, 9.0, 12.0)
    assert (watch.stall_timeout, watch.stall_cadence, watch.push_progress) == (600.0, {"save_interval_steps": 10},
                                                                                False)
    _, again = trigger.serialize()  # written back in this release's form
    assert JobSetTrigger(**json.loads(json.dumps(again))).watch == watch


def test_an_unknown_flat_setting_is_refused_naming_it_and_the_allowed_ones():
    with pytest.raises(TypeError, match=r"pol_interval.*allowed: .*poll_interval"):
        JobSetTrigger(CONNECTION, "default", "run-a1", pol_interval=7)
