"""The launch trigger's settings: the operator's options as one serializable record (core.attempt.launch_options
WatchSettings), through Airflow's trigger table as JSON, and a row the previous release serialized (flat keyword
arguments) loading as it was. Airflow stores `serialize()`'s kwargs in its trigger table and rebuilds the trigger
with them in the triggerer (Airflow docs, "Deferrable Operators & Triggers": "serialize ... returns the
classpath and keyword arguments ... to re-construct the trigger", which must be JSON-serializable)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import yaml

from tests.doubles.memory_jobset import status_completed, status_running
from tests.support.js_helpers import jobset_body
from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent
from mtc_provider.core.attempt.launch_options import WATCH_FLAT, LaunchOptions, WatchSettings
from mtc_provider.core.definition.description.run import parse_run
from mtc_provider.triggers.jobset import JobSetTrigger

CONNECTION = {"kind": "local", "home": "/nonexistent/mtc-home"}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local.yaml"
# Every option away from its default, as a rendered template gives some of them (text).
GIVEN = {"target_step": 40, "crash_loop_attempts": 2, "poll_interval": "7", "stall_timeout": "derived",
         "startup_timeout": 123, "image_pull_timeout": 456, "capacity_log_interval": 11, "listing_timeout": 22,
         "progress_interval": 33, "pod_logs": "false", "pod_logs_interval": 44, "pod_logs_max_lines": 55,
         "pod_logs_max_bytes": 666, "deletion_timeout": 77, "api_outage_timeout": 88, "keep_failed_attempts": 1}
# What JobSetTrigger.serialize() wrote before issue 36 (main 7c83cee): flat keyword arguments, all but pod_logs
# away from their defaults (pod logs need pods, which the in-memory cluster does not list).
OLD_ROW = {"connection": CONNECTION, "namespace": "default", "name": "train", "resource_version": None,
           "restarts_seen": 0, "poll_interval": 0, "checkpoint_dir": None, "stall_timeout": None,
           "delete_on_kill": False, "extra": {"attempt": 3}, "gcp_conn_id": "gcp", "impersonation_chain": ["sa@p"],
           "startup_timeout": 3600.0, "capacity_log_interval": 12.0, "listing_timeout": 34.0,
           "progress_interval": 56.0, "api_outage_timeout": 78.0, "api_outage_log_interval": 9.0,
           "api_backoff_max": 8.0, "request_timeout": 7.0, "image_pull_timeout": 65.0, "pod_logs": False,
           "pod_logs_interval": 4.0, "pod_logs_max_lines": 3, "pod_logs_max_bytes": 512, "push_progress": False,
           "stall_cadence": {"checkpoint_period": 9}, "backup_dir": "/b"}


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
    expected = {"poll_interval": 7.0, "startup_timeout": 123.0, "image_pull_timeout": 456.0,
                "capacity_log_interval": 11.0, "listing_timeout": 22.0, "progress_interval": 33.0,
                "pod_logs": False, "pod_logs_interval": 44.0, "pod_logs_max_lines": 55, "pod_logs_max_bytes": 666,
                "deletion_timeout": 77.0, "api_outage_timeout": 88.0,
                "stall_timeout": options.stall_timeout, "stall_cadence": options.stall_cadence}
    assert {name: getattr(again, name) for name in expected} == expected
    assert options.stall_cadence and options.stall_timeout > 0  # "derived": the trigger re-derives from the cadence
    assert not any("token" in key.lower() or "password" in key.lower() for key in json.dumps(stored).split('"'))


async def test_a_row_serialized_by_the_previous_release_loads_and_watches(cluster):
    """A triggerer upgraded while a launch is deferred rebuilds the trigger from the old row's flat kwargs."""
    trigger = JobSetTrigger(**json.loads(json.dumps(OLD_ROW)))
    flat = {name: value for name, value in OLD_ROW.items() if name in WATCH_FLAT}
    assert {name: getattr(trigger, name) for name in flat} == flat
    _, kwargs = trigger.serialize()
    # backup_nodes is new: an old row has none (its multi-tier backups count once the next attempt is launched)
    assert set(kwargs) - {"watch", "backup_nodes"} == set(OLD_ROW) - set(WATCH_FLAT) and "watch" in kwargs
    assert JobSetTrigger(**kwargs).serialize()[1] == kwargs
    cluster.plan([status_running(), status_completed()])
    cluster.create("default", jobset_body())
    events = [JobSetEvent.from_payload(e.payload) async for e in trigger.run()]
    assert [e.kind for e in events] == [ENDED] and events[0].state.phase == "succeeded"


def test_an_unknown_setting_is_refused_naming_it_and_what_is_allowed():
    with pytest.raises(TypeError, match=r"unexpected settings pod_log_lines; allowed: poll_interval, .*push_progress"):
        JobSetTrigger(connection=CONNECTION, namespace="default", name="train", pod_log_lines=5)
