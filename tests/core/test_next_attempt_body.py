"""The next attempt's body, renumbered from the one the operator rendered (core.attempt.next_in_try): exactly what
the operator renders for that attempt (operators.jobset_launch `attempt_body`), with the step history it starts from."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from mtc_provider.core.attempt.launch import attempt_of, history_of
from mtc_provider.core.attempt.next_in_try import renumbered
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.basics.vocabulary import STEP_HISTORY_ANNOTATION
from mtc_provider.core.definition.render.customization import CustomizationSpec
from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec, spec_from_dict
from mtc_provider.core.definition.shape.tpu import SliceSpec

TI = SimpleNamespace(dag_id="train_llama", run_id="manual__2026-12-06T10:00:00+00:00", task_id="train", try_number=3)


def _sections(customization=None):
    slices = spec_from_dict(SliceSpec, "slices", {"tpu_type": "v6e", "topology": "4x4", "num_slices": 2})
    checkpointing = spec_from_dict(CheckpointingSpec, "checkpointing", {
        "run_name": "llama", "base_output_directory": "gs://bucket/out", "steps": 1000, "checkpoint_period": 100})
    workload = spec_from_dict(WorkloadSpec, "workload", {"jobset_name": "llama-70b-pretraining-long-name",
                                                         "image": "gcr.io/p/maxtext:1"})
    return slices, checkpointing, workload, CustomizationSpec.from_value(customization)


@pytest.mark.parametrize("customization", [None, {"queue_name": "tpu-queue", "priority_class_name": "high",
                                                  "node_selector": {"team": "ml"}}])
def test_a_renumbered_body_is_the_operators_render_of_that_attempt(customization):
    from mtc_provider.operators.jobset_launch import attempt_body as _attempt_body

    sections = _sections(customization)
    _, template = _attempt_body(*sections, TI, 4)
    owner = {"dag_id": TI.dag_id, "run_id": TI.run_id, "task_id": TI.task_id}
    for number in (5, 6, 42):
        name, body = renumbered({"jobset_name": sections[2].jobset_name, "body": template}, owner, number, [10, 40])
        expected_name, expected = _attempt_body(*sections, TI, number)
        expected["metadata"].setdefault("annotations", {})[STEP_HISTORY_ANNOTATION] = json.dumps([10, 40])
        assert (name, body) == (expected_name, expected)
        assert attempt_of(body) == number and history_of(body) == [10, 40] and name.endswith(f"-a{number}")
    assert attempt_of(template) == 4  # the operator's body is left as it was


@pytest.mark.parametrize("attempt", [0, -1, True, "2"])
def test_a_bad_attempt_number_is_refused_by_name(attempt):
    with pytest.raises(SpecError, match="attempt"):
        renumbered({"jobset_name": "train", "body": {"metadata": {}}}, {"dag_id": "d", "run_id": "r", "task_id": "t"},
                   attempt, [None])

