"""The launch operator's settings, parsed once from its rendered fields (pure).

A rendered template is text ("4", "true", "60"), a DAG author's value a number or a bool: `LaunchOptions.parse`
types either, or raises a SpecError naming the field, before the try makes any call. The trigger takes
`LaunchOptions.watch()` (`WatchSettings`, JSON-able), so the worker and the triggerer run on the same figures.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from mtc_provider.core.attempt import budget as budgets
from mtc_provider.core.attempt import outage as outages
from mtc_provider.core.basics.errors import SpecError, finite_number, integer
from mtc_provider.core.basics.kind_rules import rules_for
from mtc_provider.core.attempt.resubmission import DEFAULT_CRASH_LOOP_ATTEMPTS
from mtc_provider.core.measure.cadence import FIRST_STEP_FLOOR_S, stall_rule
from mtc_provider.core.basics.vocabulary import DEFAULT_POLL_INTERVAL_S

WAIT_FOR_CHECKPOINT = "checkpoint"
WAIT_FOR_COMPLETION = "completion"
WAIT_FOR = (WAIT_FOR_CHECKPOINT, WAIT_FOR_COMPLETION)

# The operator's keyword arguments that are settings (not the run's sections nor where it runs), with defaults.
OPTION_DEFAULTS: dict[str, Any] = {
    "target_step": None, "crash_loop_attempts": DEFAULT_CRASH_LOOP_ATTEMPTS, "poll_interval": DEFAULT_POLL_INTERVAL_S,
    "stall_timeout": None, "stall_cadence": None, "startup_timeout": None, "image_pull_timeout": 900.0,
    "capacity_log_interval": 300.0, "listing_timeout": 1800.0, "progress_interval": 300.0, "pod_logs": True,
    "pod_logs_interval": 30.0, "pod_logs_max_lines": 100, "pod_logs_max_bytes": 32_768, "deletion_timeout": 900.0,
    "api_outage_timeout": outages.DEFAULT_TIMEOUT, "fault_plan": None, "wait_for": WAIT_FOR_CHECKPOINT,
    "keep_failed_attempts": 0, "first_step_floor": FIRST_STEP_FLOOR_S,
    "budget_interruptions": budgets.DEFAULT_WINDOW, "min_steps_per_interruption": budgets.DERIVED,
    "min_goodput": budgets.DEFAULT_MIN_GOODPUT, "goodput_window": budgets.DEFAULT_GOODPUT_WINDOW_S,
}
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class WatchTimes:
    """Seconds the watch waits, bounds and reports by (each >= 0; None: no bound / no lines). The defaults are the
    operator's, so a record serialized without a later field loads."""

    poll_interval: float = OPTION_DEFAULTS["poll_interval"]
    capacity_log_interval: float = OPTION_DEFAULTS["capacity_log_interval"]
    listing_timeout: float = OPTION_DEFAULTS["listing_timeout"]
    deletion_timeout: float = OPTION_DEFAULTS["deletion_timeout"]
    api_outage_timeout: float = OPTION_DEFAULTS["api_outage_timeout"]
    startup_timeout: float | None = OPTION_DEFAULTS["startup_timeout"]
    image_pull_timeout: float | None = OPTION_DEFAULTS["image_pull_timeout"]
    progress_interval: float | None = OPTION_DEFAULTS["progress_interval"]
    first_step_floor: float = FIRST_STEP_FLOOR_S  # the least first-step limit of a start of the pods


@dataclass(frozen=True)
class PodLogs:
    """Whether the leader pod's log is streamed into the task log, and its bounds per read. Off by default: a
    JobSet a bare trigger (the sensor's) watches may be anyone's."""

    enabled: bool = False
    interval: float = OPTION_DEFAULTS["pod_logs_interval"]
    max_lines: int = OPTION_DEFAULTS["pod_logs_max_lines"]
    max_bytes: int = OPTION_DEFAULTS["pod_logs_max_bytes"]


@dataclass(frozen=True)
class ApiPacing:
    """How the trigger's watch paces an unreachable API (trigger settings, not the operator's options)."""

    log_interval: float = outages.DEFAULT_LOG_INTERVAL  # seconds between "Kubernetes API unreachable" lines
    backoff_max: float = outages.DEFAULT_MAX_BACKOFF  # the longest wait between tries (a Retry-After may ask more)
    request_timeout: float = 60.0  # client-side seconds per request (a watch gets its timeoutSeconds + 30)


@dataclass(frozen=True)
class WatchSettings:
    """What the trigger that watches one attempt takes of the options (triggers.jobset.JobSetTrigger `watch`).

    It crosses a process boundary: the trigger serializes it with `to_dict` into Airflow's trigger table and the
    triggerer restores it with `from_dict`. It carries no secret."""

    times: WatchTimes = field(default_factory=WatchTimes)
    pod_logs: PodLogs = field(default_factory=PodLogs)
    stall_timeout: float | None = None  # None: no stall detection
    stall_cadence: dict[str, Any] | None = None  # the run's cadence the trigger re-derives the limit from
    pacing: ApiPacing = field(default_factory=ApiPacing)
    push_progress: bool = True  # push each progress report to XCom during the run

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "WatchSettings":
        return cls(times=WatchTimes(**data["times"]), pod_logs=PodLogs(**data["pod_logs"]),
                   stall_timeout=data.get("stall_timeout"), stall_cadence=data.get("stall_cadence"),
                   pacing=ApiPacing(**data.get("pacing") or {}), push_progress=bool(data.get("push_progress", True)))

    @classmethod
    def from_row_0_1(cls, flat: Mapping[str, Any]) -> "WatchSettings":
        """The settings a trigger row of release 0.1.0 gave as keyword arguments by these flat names (its serialize()
        wrote them so): a task deferred before the upgrade is rebuilt with them by the upgraded triggerer."""
        unknown = sorted(set(flat) - set(_ROW_0_1))
        if unknown:
            raise TypeError(f"JobSetTrigger got unexpected keyword arguments {', '.join(unknown)}; allowed: watch, "
                            f"or release 0.1.0's {', '.join(_ROW_0_1)}")
        parts: dict[str | None, dict[str, Any]] = {"times": {}, "pod_logs": {}, "pacing": {}, None: {}}
        for name, value in flat.items():
            part, attr = _ROW_0_1[name]
            parts[part][attr] = value
        return cls(times=WatchTimes(**parts["times"]), pod_logs=PodLogs(**parts["pod_logs"]),
                   pacing=ApiPacing(**parts["pacing"]), **parts[None])


# Release 0.1.0's trigger keyword arguments: (the WatchSettings part, its field); None: a field of WatchSettings.
_ROW_0_1: dict[str, tuple[str | None, str]] = {
    **{name: ("times", name) for name in ("poll_interval", "capacity_log_interval", "listing_timeout",
                                          "api_outage_timeout", "startup_timeout", "image_pull_timeout",
                                          "progress_interval")},
    "pod_logs": ("pod_logs", "enabled"), "pod_logs_interval": ("pod_logs", "interval"),
    "pod_logs_max_lines": ("pod_logs", "max_lines"), "pod_logs_max_bytes": ("pod_logs", "max_bytes"),
    "api_outage_log_interval": ("pacing", "log_interval"), "api_backoff_max": ("pacing", "backoff_max"),
    "request_timeout": ("pacing", "request_timeout"), "stall_timeout": (None, "stall_timeout"),
    "stall_cadence": (None, "stall_cadence"), "push_progress": (None, "push_progress")}


@dataclass(frozen=True)
class LaunchOptions:
    """The settings of one try, typed."""

    target_step: int
    crash_loop_attempts: int
    wait_for: str
    keep_failed_attempts: int
    fault_plan: Any
    times: WatchTimes
    pod_logs: PodLogs
    stall_timeout: float | None  # None: no stall detection
    stall_cadence: dict[str, Any] | None  # the run's cadence when the limit is derived (the trigger re-derives it)
    budget: budgets.Budget = budgets.Budget()  # when the run ends for getting nowhere (core.attempt.budget)

    @property
    def completion(self) -> bool:
        return self.wait_for == WAIT_FOR_COMPLETION

    @classmethod
    def parse(cls, fields: Mapping[str, Any], *, default_target_step: int, kind: str, checkpointing: Any,
              workload: Any) -> tuple["LaunchOptions", list[str]]:
        """The options and the warnings to log; SpecError names the first bad field (in the order a DAG author
        reads them: the target, the guards, the watch)."""
        given = {**OPTION_DEFAULTS, **fields}
        target_step = default_target_step if given["target_step"] in (None, "") else int(given["target_step"])
        if target_step <= 0:
            raise SpecError("target_step", given["target_step"], "a positive integer (default: checkpointing.steps)")
        crash_loop = integer("crash_loop_attempts", given["crash_loop_attempts"], "an integer >= 1", 1)
        if given["wait_for"] not in WAIT_FOR:
            raise SpecError("wait_for", given["wait_for"], " or ".join(WAIT_FOR))
        pod_logs = _pod_logs(given)
        stall_timeout, stall_cadence, warnings = stall_rule(
            given["stall_timeout"], checkpointing, kind, reported=pod_logs.enabled or rules_for(kind).local_processes,
            extra_flags=workload.extra_flags, cadence_given=given["stall_cadence"])
        for field in ("startup_timeout", "image_pull_timeout"):
            if given[field] not in (None, "") and float(given[field]) <= 0:
                raise SpecError(field, given[field], "a positive number of seconds, or None")
        first_step_floor = finite_number("first_step_floor", given["first_step_floor"], "a positive number of seconds",
                                         low=0, strict=True)
        seconds = {}
        for field in ("poll_interval", "listing_timeout", "deletion_timeout", "capacity_log_interval"):
            if float(given[field]) < 0:
                raise SpecError(field, given[field], "a number of seconds >= 0")
            seconds[field] = float(given[field])
        times = WatchTimes(**seconds, api_outage_timeout=outages.validate("api_outage_timeout",
                                                                          given["api_outage_timeout"]),
                           startup_timeout=_optional_seconds(given["startup_timeout"]),
                           image_pull_timeout=_optional_seconds(given["image_pull_timeout"]),
                           progress_interval=_optional_seconds(given["progress_interval"]),
                           first_step_floor=first_step_floor)
        keep = keep_count("keep_failed_attempts", given["keep_failed_attempts"])
        run_budget = budgets.Budget.parse(given["budget_interruptions"], given["min_steps_per_interruption"],
                                         given["min_goodput"], given["goodput_window"],
                                         budgets.derived_min_steps(checkpointing))
        return cls(target_step=target_step, crash_loop_attempts=crash_loop, wait_for=given["wait_for"],
                   keep_failed_attempts=keep, fault_plan=given["fault_plan"], times=times, pod_logs=pod_logs,
                   stall_timeout=stall_timeout, stall_cadence=stall_cadence, budget=run_budget), warnings

    def watch(self) -> WatchSettings:
        """The trigger's settings (triggers.jobset.JobSetTrigger `watch`), from these options: no stall detection
        in completion mode."""
        stall = None if self.completion else self.stall_timeout
        cadence = None if stall is None or not self.stall_cadence else dict(self.stall_cadence)
        return WatchSettings(times=self.times, pod_logs=self.pod_logs, stall_timeout=stall, stall_cadence=cadence)


def settings_signature(init: Callable[..., Any]) -> inspect.Signature:
    """`init`'s signature with the settings as keyword arguments before its **kwargs: what Airflow reads to apply
    `default_args` and to check `partial()` arguments (airflow.sdk.bases.operator.BaseOperatorMeta._apply_defaults)."""
    signature = inspect.signature(init)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    extra = [p for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD]
    settings = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
                for name, default in OPTION_DEFAULTS.items() if name not in signature.parameters]
    return signature.replace(parameters=params + settings + extra)


def _optional_seconds(value: Any) -> float | None:
    return None if value in (None, "") else float(value)


def keep_count(field: str, value: Any) -> int:
    """A count of JobSets to keep: an integer >= 0 (a rendered template is text; True means 1)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if not isinstance(value, int) or value < 0:
        raise SpecError(field, value, "an integer >= 0 (how many of the newest failed attempts' JobSets to keep)")
    return value


def _pod_logs(given: Mapping[str, Any]) -> PodLogs:
    """pod_logs and its bounds, as rendered templates may give them (text); errors name the field."""
    flag = given["pod_logs"]
    if isinstance(flag, str) and flag.strip().lower() in TRUE_WORDS + FALSE_WORDS:
        flag = flag.strip().lower() in TRUE_WORDS
    if not isinstance(flag, bool):
        raise SpecError("pod_logs", given["pod_logs"], "true or false")
    numbers = {}
    for field, low, kind in (("pod_logs_interval", 1.0, float), ("pod_logs_max_lines", 1, int),
                             ("pod_logs_max_bytes", 256, int)):
        value = given[field]
        try:
            number = kind(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or number < low or (kind is int and float(value) != number):
            raise SpecError(field, value, f"{'an integer' if kind is int else 'a number'} >= {low}")
        numbers[field] = number
    return PodLogs(flag, numbers["pod_logs_interval"], numbers["pod_logs_max_lines"], numbers["pod_logs_max_bytes"])
