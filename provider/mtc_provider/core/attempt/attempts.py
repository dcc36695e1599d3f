"""A run's attempts, read from its JobSets (pure): which attempt, its state, and where its checkpoints are.

The launch operator labels every attempt with the run name and the try number, and renders MaxText's
`run_name=` and `base_output_directory=` into the training container's args; this module reads them back,
so `mtc status` and `MtcJobSetHook` need nothing but a JobSet listing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from mtc_provider.core.basics import labels as L
from mtc_provider.core.definition.render.jobset_manifest import pod_template
from mtc_provider.core.basics.names import label_value
from mtc_provider.core.attempt.status import evaluate_jobset


@dataclass(frozen=True)
class Attempt:
    """One attempt (one JobSet) of a run."""

    name: str
    namespace: str
    attempt: int
    phase: str
    restarts: int
    reason: str
    created: str
    checkpoint_dir: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_selector(run_name: str) -> str:
    """The label selector of every JobSet the provider launched for this run name."""
    return L.selector({L.RUN_NAME: label_value(run_name), L.MANAGED_BY: L.MANAGED_BY_VALUE})


def _args(jobset: Mapping[str, Any]) -> list[str]:
    try:
        template = pod_template(jobset)["spec"]
        return [str(a) for c in template.get("containers") or [] for a in (c.get("args") or [])]
    except (KeyError, IndexError, TypeError):
        return []


def checkpoint_dir_of(jobset: Mapping[str, Any]) -> str:
    """`<base_output_directory>/<run_name>/checkpoints` from the container args; '' when they are not there."""
    flags = dict(arg.split("=", 1) for arg in _args(jobset) if "=" in arg)
    base, run_name = flags.get("base_output_directory", ""), flags.get("run_name", "")
    return f"{base.rstrip('/')}/{run_name}/checkpoints" if base and run_name else ""


def attempt_of(jobset: Mapping[str, Any]) -> Attempt:
    metadata = jobset.get("metadata") or {}
    state = evaluate_jobset(jobset)
    return Attempt(name=metadata.get("name", ""), namespace=metadata.get("namespace", ""),
                   attempt=L.attempt_number(metadata.get("labels")), phase=state.phase, restarts=state.restarts,
                   reason=state.reason or state.message, created=str(metadata.get("creationTimestamp", "")),
                   checkpoint_dir=checkpoint_dir_of(jobset))


def attempts(jobsets: Iterable[Mapping[str, Any]]) -> list[Attempt]:
    """The run's attempts, oldest first (by try number, then creation time, then name)."""
    return sorted((attempt_of(j) for j in jobsets), key=lambda a: (a.attempt, a.created, a.name))
