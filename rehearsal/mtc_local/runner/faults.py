"""The fault plan: declarative, seeded faults the runner injects into a running JobSet (pure).

Carried as the JobSet annotation `mtc.local/fault-plan`, JSON: a list of faults, or
`{"seed": 7, "faults": [...]}`. A fault is `{"kind": K, "at_step": N}` or `{"kind": K, "at_seconds": S}`,
optionally with `slice` and `host`; a missing slice/host is drawn from the seeded RNG, so a plan replays the same.
Kinds: sigkill_host (hardware failure), sigterm_slice (preemption), wipe_ramdisk (replaced node: wipe the host's
ramdisk, then SIGKILL it), kill_slice (SIGKILL every host of a slice), hang (SIGSTOP every host of a slice),
image_pull / unschedulable / mount_failure (the slice's pods of the attempt stay Pending, for `seconds` or for ever; at_step
absent or 0; with `at_restart` N from the first start at in-cluster restart N on), listing_outage (the home's local GCS listings answer `status` for `seconds`); the extra fields are
checked by mtc_local.faults.plan (the one validator, shared with the run description).
`at_step` fires when any pod's log shows `completed step: N` with N >= at_step; `at_seconds` counts from
creation. Each fault fires once per JobSet, across restarts.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from mtc_provider.core.basics.errors import SpecError, require
from mtc_local.faults.fields import EXTRA_KEYS
from mtc_local.faults.plan import check_fault_plan
from mtc_local.faults.kinds import BUCKET_FAULT_KINDS, START_FAULT_KINDS
from mtc_local.faults.kinds import HOST_FAULT_KINDS as HOST_KINDS
from mtc_local.runner.manifest import FAULT_PLAN_ANNOTATION

STEP_LINE = re.compile(rb"completed step: (\d+)")
FIELD = f'metadata.annotations["{FAULT_PLAN_ANNOTATION}"]'


@dataclass(frozen=True)
class Fault:
    index: int
    kind: str
    slice: int | None  # None for a bucket fault
    host: int | None
    at_step: int | None = None
    at_seconds: float | None = None
    seconds: float | None = None  # how long a start fault holds the pods / an outage lasts
    status: int | None = None  # listing_outage's HTTP status
    prefix: str | None = None  # listing_outage's object-name prefix
    at_restart: int | None = None  # a start fault: acts at this in-cluster restart or later (None: at creation)

    @property
    def at_start(self) -> bool:
        """Applied when the attempt's pods are created rather than when due."""
        return self.kind in START_FAULT_KINDS

    def holds_at(self, restart: int) -> bool:
        """A start fault: does it hold the pods started for in-cluster restart `restart`?"""
        return self.at_start and restart >= (self.at_restart or 0)

    def due(self, step: int | None, elapsed: float) -> bool:
        if self.at_step is not None:
            return step is not None and step >= self.at_step
        return self.at_seconds is not None and elapsed >= self.at_seconds

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def parse_plan(raw: str | list | dict | None, num_slices: int, hosts_per_slice: int) -> list[Fault]:
    """Validate the plan (mtc_local.faults.plan, the run description's own validator) and resolve every slice/host;
    raise SpecError naming the bad field."""
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as err:
            raise SpecError(FIELD, raw, f"JSON ({err.msg})") from None
    seed: Any = 0
    items = raw
    if isinstance(raw, dict):
        seed, items = raw.get("seed", 0), raw.get("faults", [])
        require(isinstance(seed, int) and not isinstance(seed, bool), f"{FIELD}.seed", seed, "an integer")
    require(isinstance(items, list), FIELD, items, "a list of faults or {seed, faults}")
    rng = random.Random(seed)
    faults = []
    for i, item in enumerate(check_fault_plan(items, num_slices, hosts_per_slice, field=FIELD)):
        kind = item["kind"]
        at_step = 0 if kind in START_FAULT_KINDS else item.get("at_step")
        at_seconds = item.get("at_seconds")
        extras = {key: item[key] for key in EXTRA_KEYS if key in item}
        # Draw in a fixed order (slice, then host) whether or not given, so editing one fault keeps the others.
        drawn_slice, drawn_host = rng.randrange(num_slices), rng.randrange(hosts_per_slice)
        slice_index = None if kind in BUCKET_FAULT_KINDS else item.get("slice", drawn_slice)
        host = item.get("host", drawn_host) if kind in HOST_KINDS else None
        faults.append(Fault(i, kind, slice_index, host, at_step, float(at_seconds) if at_seconds is not None else None,
                            **extras))
    return faults


def last_step(chunk: bytes, current: int | None) -> int | None:
    """The highest `completed step: N` in a chunk of log output, or the current value."""
    steps = [int(m.group(1)) for m in STEP_LINE.finditer(chunk)]
    if not steps:
        return current
    return max(steps) if current is None else max(current, *steps)
