"""The next attempt of a try as the triggerer submits it (pure): its body from one the operator rendered in advance.

An attempt's JobSet differs from the next one of the same try only in its name (`<jobset>-<hash>-a<N>`:
core.definition.description.jobset_names.attempt_name) and its attempt label, on the JobSet and on each pod template
(core.definition.render.jobset_manifest; `tests/core/test_next_in_try.py` checks the equality against a full render). So
the operator renders one body when it defers (operators.jobset: `extra["next_attempt"]`), and the trigger
renumbers it for each attempt it submits in the same try, with the step history the attempt starts from (the
annotation a retry that lost the run lock's record reads back: core.attempt.launch.history_of).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping, Sequence

from mtc_provider.core.basics import labels as L
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.basics.names import label_value
from mtc_provider.core.basics.vocabulary import STEP_HISTORY_ANNOTATION
from mtc_provider.core.definition.description.jobset_names import attempt_name

NEXT_ATTEMPT = "next_attempt"  # the operator's `extra` key: {"jobset_name", "body"} (no secret: a manifest)


def next_attempt_name(template: Mapping[str, Any], owner: Mapping[str, Any], attempt: int) -> str:
    """The deterministic name of attempt `attempt` of this task (the worker's own naming)."""
    return attempt_name(str(template["jobset_name"]), str(owner["dag_id"]), str(owner["run_id"]),
                        str(owner["task_id"]), int(attempt))


def renumbered(template: Mapping[str, Any], owner: Mapping[str, Any], attempt: int,
               history: Sequence[int | None]) -> tuple[str, dict[str, Any]]:
    """(name, body) of attempt `attempt`, from the operator's rendered body: name, attempt labels and step history."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise SpecError("attempt", attempt, "an integer >= 1")
    body = copy.deepcopy(dict(template["body"]))
    name = next_attempt_name(template, owner, attempt)
    body["metadata"]["name"] = name
    number = label_value(str(attempt))
    body["metadata"].setdefault("labels", {})[L.ATTEMPT] = number
    for job in body.get("spec", {}).get("replicatedJobs") or []:
        pod = job["template"]["spec"]["template"]
        pod.setdefault("metadata", {}).setdefault("labels", {})[L.ATTEMPT] = number
    body["metadata"].setdefault("annotations", {})[STEP_HISTORY_ANNOTATION] = json.dumps(list(history))
    return name, body
