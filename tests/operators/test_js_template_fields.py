"""Every user-facing constructor argument of every operator and sensor is templated, or listed here with the reason
it is not (issue 27). Airflow renders only the attributes named in `template_fields`
(airflow/sdk/bases/operator.py, BaseOperator.render_template_fields)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from airflow.sdk import BaseOperator, BaseSensorOperator

import mtc_provider.operators
import mtc_provider.sensors

# Deliberately not templated, and why.
NOT_TEMPLATED = {
    "deferrable": "decides how Airflow runs the task (worker or triggerer), as in Airflow's own operators",
    "next_attempt_in_trigger": "decides, as `deferrable` does, where the task's work runs (the next attempt of a try "
                               "submitted by the triggerer or by a worker)",
    "retries": "BaseOperator's: the scheduler reads it from the parsed DAG",
    "retry_delay": "BaseOperator's: the scheduler reads it from the parsed DAG",
    "retry_exponential_backoff": "BaseOperator's: the scheduler reads it from the parsed DAG",
    "max_retry_delay": "BaseOperator's: the scheduler reads it from the parsed DAG",
    "checkpoint_store_factory": "a Python callable (tests and custom stores), not a value to render",
    "goodput_reader_factory": "a Python callable (tests, or another Cloud Logging reader), not a value to render",
}
# Per class: sensors' poll_interval is their poke_interval, which BaseSensorOperator validates when the DAG is
# parsed; CheckpointProgressSensor validates window_s then too (a bad value fails the DAG import, not a run).
NOT_TEMPLATED_ON = {
    "CheckpointProgressSensor": {"poll_interval", "window_s"},
    "MtcJobSetSensor": {"poll_interval"},
}


def _operator_classes() -> list[type]:
    found = set()
    for package in (mtc_provider.operators, mtc_provider.sensors):
        for module in pkgutil.iter_modules(package.__path__):
            for value in vars(importlib.import_module(f"{package.__name__}.{module.name}")).values():
                if inspect.isclass(value) and issubclass(value, BaseOperator) \
                        and value.__module__.startswith("mtc_provider"):
                    found.add(value)
    return sorted(found, key=lambda c: c.__name__)


def _arguments(cls: type) -> set[str]:
    """The constructor arguments of the class and its provider bases (kwargs go to Airflow's BaseOperator)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (BaseOperator, BaseSensorOperator) or not klass.__module__.startswith("mtc_provider"):
            continue
        if "__init__" in vars(klass):
            names |= {p for p in inspect.signature(klass.__init__).parameters if p not in ("self", "kwargs")}
    return names


def test_template_fields_cover_every_user_facing_argument_of_every_operator_and_sensor():
    classes = _operator_classes()
    assert len(classes) >= 12  # every module was found
    for cls in classes:
        untemplated = _arguments(cls) - set(cls.template_fields) - set(NOT_TEMPLATED) \
            - NOT_TEMPLATED_ON.get(cls.__name__, set())
        assert not untemplated, f"{cls.__name__}: {sorted(untemplated)} are neither templated nor listed with a reason"


@pytest.mark.parametrize("cls", _operator_classes(), ids=lambda c: c.__name__)
def test_template_fields_name_attributes_the_operator_sets(cls):
    missing = [f for f in cls.template_fields if f not in _arguments(cls)]
    assert not missing, f"{cls.__name__}.template_fields names {missing}, which no constructor argument sets"


def test_template_fields_include_the_google_parameters_wherever_gke_is_reached():
    from mtc_provider.target import GOOGLE_PARAMETERS

    reach_gke = [c for c in _operator_classes() if "target" in _arguments(c)]
    assert {c.__name__ for c in reach_gke} >= {"MtcJobSetOperator", "MtcDeleteJobSetOperator", "MtcJobSetSensor",
                                               "MtcClusterReadinessSensor", "MtcCreateBucketOperator"}
    for cls in reach_gke:
        assert set(GOOGLE_PARAMETERS) <= set(cls.template_fields), cls.__name__
