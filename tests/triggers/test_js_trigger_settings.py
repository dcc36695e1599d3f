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
                                    checkpointing=config.checkpointing, workload=config.workload, injects_faults=True)
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
