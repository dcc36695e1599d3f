"""The launch operator's settings are keyword arguments whose names and defaults live once, in
core.attempt.launch_options.OPTION_DEFAULTS; `settings_signature` shows them to Airflow, which reads the
signature of `__init__` to apply `default_args` and to check `partial()` arguments
(airflow.sdk.bases.operator.BaseOperatorMeta._apply_defaults). A misspelt one is refused by BaseOperator's
"Invalid arguments were passed" check, naming it."""

from __future__ import annotations

import datetime
import inspect

import pytest
from airflow.sdk import DAG

from mtc_provider.core.attempt.launch_options import OPTION_DEFAULTS
from mtc_provider.operators.jobset import MtcJobSetOperator

SECTIONS = {"slices": {"tpu_type": "v5p-8"}, "checkpointing": {"run_name": "r", "base_output_directory": "/o",
                                                                 "steps": 10},
            "workload": {"jobset_name": "r", "image": "i"}}


def _dag(**default_args) -> DAG:
    return DAG("settings_signature", schedule=None, start_date=datetime.datetime(2026, 1, 1),
               default_args=default_args)


def test_every_setting_is_in_the_signature_airflow_reads():
    parameters = inspect.signature(MtcJobSetOperator.__init__).parameters
    assert {name: parameters[name].default for name in OPTION_DEFAULTS} == OPTION_DEFAULTS


def test_default_args_reach_a_setting():
    with _dag(poll_interval=5.0, keep_failed_attempts=2):
        task = MtcJobSetOperator(task_id="train", **SECTIONS)
    assert task.poll_interval == 5.0 and task.keep_failed_attempts == 2


def test_partial_takes_a_setting():
    with _dag():
        mapped = MtcJobSetOperator.partial(task_id="train", stall_timeout=600, **SECTIONS).expand(
            target_step=[5, 9])
    assert mapped.partial_kwargs["stall_timeout"] == 600


def test_a_misspelt_setting_is_refused_naming_it():
    with _dag(), pytest.raises(TypeError, match=r"(?s)Invalid arguments were passed.*stall_timout"):
        MtcJobSetOperator(task_id="train", stall_timout=600, **SECTIONS)
