"""The one validator of the local fault plan (pure): the run description (`fault_plan`, from the DAG form, the
YAML or the operator) and the runner (the JobSet annotation) both call `check_fault_plan`, so both accept and
refuse the same plans with the same words.

A fault is `{"kind": K, "at_step": N}` or `{"kind": K, "at_seconds": S}`, optionally with `slice` and `host`
(the runner draws a missing one from the plan's seed); the kind-specific fields are mtc_local.faults.fields'.
"""

from __future__ import annotations

from typing import Any, Mapping

from mtc_provider.core.basics.errors import require
from mtc_local.faults.fields import EXTRA_KEYS, check_extras
from mtc_local.faults.kinds import BUCKET_FAULT_KINDS, START_FAULT_KINDS
from mtc_local.faults.kinds import FAULT_KIND_NAMES as KINDS, HOST_FAULT_KINDS as HOST_KINDS

KEYS = ("kind", "at_step", "at_seconds", "slice", "host", *EXTRA_KEYS)


def _index(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


def check_fault_plan(raw: Any, num_slices: int, hosts_per_slice: int, steps: int | None = None,
                     field: str = "fault_plan") -> list[dict[str, Any]]:
    """Raise SpecError (field, value, what is allowed) for the first bad fault; return the faults, each with its
    kind-specific fields normalised. `steps`: when known, a fault at or after the last step is refused."""
    require(isinstance(raw, (list, tuple)), field, raw, "a list of faults like {kind, at_step, slice, host}")
    faults = []
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        require(isinstance(item, Mapping), where, item, "a mapping with kind and at_step")
        kind = item.get("kind")
        require(kind in KINDS, f"{where}.kind", kind, ", ".join(KINDS))
        unknown = sorted(set(item) - set(KEYS))
        require(not unknown, where, unknown, f"keys {', '.join(KEYS)}")
        extras = check_extras(item, where)
        at_step = 0 if kind in START_FAULT_KINDS else item.get("at_step")
        at_seconds = item.get("at_seconds")
        require((at_step is None) != (at_seconds is None), where, dict(item), "exactly one of at_step, at_seconds")
        if at_step is not None:
            last = "" if steps is None else f" and below steps ({steps}: a fault at or after the last step never fires)"
            require(isinstance(at_step, int) and not isinstance(at_step, bool) and at_step >= 0
                    and (steps is None or at_step < steps), f"{where}.at_step", at_step, f"an integer >= 0{last}")
        if at_seconds is not None:
            require(isinstance(at_seconds, (int, float)) and not isinstance(at_seconds, bool) and at_seconds >= 0,
                    f"{where}.at_seconds", at_seconds, "a number >= 0")
        if "slice" in item and kind not in BUCKET_FAULT_KINDS:
            require(_index(item["slice"], num_slices), f"{where}.slice", item["slice"],
                    f"a slice index from 0 to {num_slices - 1}")
        if "host" in item:
            require(kind in HOST_KINDS, f"{where}.host", item["host"],
                    f"no host for {kind} (it acts on a whole slice); a host only for {', '.join(HOST_KINDS)}")
            require(_index(item["host"], hosts_per_slice), f"{where}.host", item["host"],
                    f"a host index from 0 to {hosts_per_slice - 1} ({hosts_per_slice} hosts per slice)")
        faults.append({**dict(item), **extras})
    return faults
