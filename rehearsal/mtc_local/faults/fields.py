"""The fields a fault of the local fault plan takes beyond kind/at_step/at_seconds/slice/host (pure).

Shared by the form's validation (core.definition.description.params) and the runner's parser (local.runner.faults), so both accept and
reject the same plans:
- start kinds (image_pull, unschedulable, mount_failure) act when the attempt's pods are created: `at_step` absent or 0, no
  `at_seconds`; optional `seconds`: after that long the pods are pulled / scheduled and run (capacity arrives
  later); without it they stay Pending for ever; optional `at_restart` N: they act on the first start of a
  JobSet's pods at in-cluster restart N or later (a restart's new node that cannot pull the image), not at creation.
- listing_outage: `seconds` (required) of failing listings with `status` (403, 429 or 503; default 503), under
  an optional object-name `prefix`; no slice or host (it hits the home's local GCS).
"""

from __future__ import annotations

from typing import Any, Mapping

from mtc_provider.core.basics.errors import require
from mtc_local.faults.kinds import BUCKET_FAULT_KINDS, LISTING_OUTAGE_STATUSES, START_FAULT_KINDS

EXTRA_KEYS = ("seconds", "status", "prefix", "at_restart")
DEFAULT_OUTAGE_STATUS = 503


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def check_extras(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Validate the kind-specific fields of one fault; return them normalised ({} when the kind has none)."""
    kind = item.get("kind")
    if kind in START_FAULT_KINDS:
        require(item.get("at_step", 0) == 0 and not isinstance(item.get("at_step"), bool), f"{where}.at_step",
                item.get("at_step"), f"absent or 0 ({kind} acts when the attempt's pods are created)")
        require("at_seconds" not in item, f"{where}.at_seconds", item.get("at_seconds"),
                f"absent ({kind} acts when the attempt's pods are created)")
        for key in ("status", "prefix"):
            require(key not in item, f"{where}.{key}", item.get(key), f"absent (only listing_outage takes {key})")
        extras: dict[str, Any] = {}
        if "seconds" in item:
            require(_positive_number(item["seconds"]), f"{where}.seconds", item["seconds"],
                    "a number of seconds > 0 after which the pods start (absent: they never start)")
            extras["seconds"] = float(item["seconds"])
        if "at_restart" in item:
            restart = item["at_restart"]
            require(isinstance(restart, int) and not isinstance(restart, bool) and restart >= 0,
                    f"{where}.at_restart", restart, "an in-cluster restart number >= 0 (0: at creation)")
            extras["at_restart"] = restart
        return extras
    if kind in BUCKET_FAULT_KINDS:
        for key in ("slice", "host"):
            require(key not in item, f"{where}.{key}", item.get(key), f"absent ({kind} hits the bucket, not a slice)")
        require("at_restart" not in item, f"{where}.at_restart", item.get("at_restart"),
                f"absent (only {', '.join(START_FAULT_KINDS)} take at_restart)")
        require(_positive_number(item.get("seconds")), f"{where}.seconds", item.get("seconds"),
                "a number of seconds > 0 the listings fail for")
        status = item.get("status", DEFAULT_OUTAGE_STATUS)
        require(status in LISTING_OUTAGE_STATUSES and not isinstance(status, bool), f"{where}.status", status,
                ", ".join(map(str, LISTING_OUTAGE_STATUSES)))
        prefix = item.get("prefix", "")
        require(isinstance(prefix, str), f"{where}.prefix", prefix, "an object-name prefix (a string)")
        return {"seconds": float(item["seconds"]), "status": status, "prefix": prefix}
    for key in EXTRA_KEYS:
        require(key not in item, f"{where}.{key}", item.get(key),
                f"absent ({kind} takes no {key}; seconds: {', '.join(START_FAULT_KINDS + BUCKET_FAULT_KINDS)})")
    return {}
