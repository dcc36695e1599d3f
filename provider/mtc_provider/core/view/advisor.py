"""Checkpoint periods from measurements: expected goodput of a two-tier schedule and the (L, P) maximising it.

The model is first order in the failure rates; docs/advisor.md derives it. One step of progress costs
tau = step_s + save_local_s * (1/L - 1/P) + save_persistent_s / P (P a multiple of L); host losses cost L*tau/2
of lost work, slice losses P*tau/2, preemptions a persistent save, each plus a restart and a restore. With F the
failure cost per second, goodput = N*step_s*(1 - F) / (N*tau + startup_s), zero when F >= 1. Young's interval
sqrt(2 x save cost x MTBF) is reported as a cross-check.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from mtc_provider.core.basics.payload import Payload
from mtc_provider.core.basics.errors import SpecError, finite_number
from mtc_provider.core.view.goodput import Timeline, timeline_from_workload_events

DEFAULT_MAX_PERIOD = 1_000_000  # steps, when the run length is not known
VARIABLE_PREFIX = "mtc_advice."  # Airflow Variable `mtc_advice.<run_name>` holds the last advice of a run


@dataclass(frozen=True)
class Costs:
    """Seconds. `restart_s`: from a failure until training runs again, restore excluded (resubmission or JobSet
    restart, process start-up, first-step compilation). `local_write_s`: the whole (async) local save, for the
    ramdisk constraint: it holds two local checkpoints, so one save must finish before the next one starts."""

    step_s: float
    save_local_s: float = 0.0
    save_persistent_s: float = 0.0
    restore_local_s: float = 0.0
    restore_persistent_s: float = 0.0
    restart_s: float = 0.0
    local_write_s: float = 0.0

    def __post_init__(self) -> None:
        finite_number("step_s", self.step_s, "a number > 0 (seconds per training step)", 0, strict=True)
        for name in ("save_local_s", "save_persistent_s", "restore_local_s", "restore_persistent_s", "restart_s",
                     "local_write_s"):
            finite_number(name, getattr(self, name), "a number >= 0 (seconds)", 0)


@dataclass(frozen=True)
class FailureRates:
    """Failures per second of wall time, by what they destroy."""

    host_loss: float = 0.0
    slice_loss: float = 0.0
    preemption: float = 0.0

    def __post_init__(self) -> None:
        for name in ("host_loss", "slice_loss", "preemption"):
            finite_number(f"rates.{name}", getattr(self, name), "a number >= 0 (failures per second)", 0)

    @property
    def total(self) -> float:
        return self.host_loss + self.slice_loss + self.preemption

    @classmethod
    def from_mtbf(cls, host_loss_s: float | None = None, slice_loss_s: float | None = None,
                  preemption_s: float | None = None, hosts: int = 1) -> "FailureRates":
        """Rates from mean times between failures in seconds (None: never). `host_loss_s` is per host: a fleet's
        figure, scaled by the number of hosts the run uses."""
        if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1:
            raise SpecError("hosts", hosts, "an integer >= 1")

        def rate(name: str, mtbf: float | None, scale: int = 1) -> float:
            if mtbf is None:
                return 0.0
            return scale / finite_number(name, mtbf, "a number > 0 (seconds), or none", 0, strict=True)

        return cls(rate("host_loss_mtbf_s", host_loss_s, hosts), rate("slice_loss_mtbf_s", slice_loss_s),
                   rate("preemption_mtbf_s", preemption_s))


@dataclass(frozen=True)
class Expected:
    """The model's figures for one schedule."""

    local_period: int
    persistent_period: int
    goodput: float
    step_cost_s: float  # tau
    failure_load: float  # F: failure cost per second of wall time
    per_failure_s: dict[str, float]


def _check_periods(local_period: Any, persistent_period: Any) -> tuple[int, int]:
    for name, value in (("local_checkpoint_period", local_period), ("checkpoint_period", persistent_period)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(name, value, "an integer >= 1 (steps)")
    if local_period >= persistent_period:
        raise SpecError("local_checkpoint_period", local_period,
                        f"an integer < checkpoint_period ({persistent_period})")
    return local_period, persistent_period


def expected_goodput(costs: Costs, rates: FailureRates, local_period: int, persistent_period: int,
                     total_steps: int | None = None, startup_s: float = 0.0) -> Expected:
    """Expected goodput of the schedule (L, P); a long run's when `total_steps` is None."""
    L, P = _check_periods(local_period, persistent_period)
    startup_s = finite_number("startup_s", startup_s, "a number >= 0 (seconds)", 0)
    lcm = L * P // math.gcd(L, P)  # steps where both tiers save count as persistent save steps
    tau = costs.step_s + costs.save_local_s * (1 / L - 1 / lcm) + costs.save_persistent_s / P
    per_failure = {"host_loss": L * tau / 2 + costs.restart_s + costs.restore_local_s,
                   "slice_loss": P * tau / 2 + costs.restart_s + costs.restore_persistent_s,
                   "preemption": costs.save_persistent_s + costs.restart_s + costs.restore_persistent_s}
    load = sum(getattr(rates, kind) * cost for kind, cost in per_failure.items())
    if load >= 1:
        goodput = 0.0
    elif total_steps is None:
        goodput = costs.step_s / tau * (1 - load)
    else:
        n = finite_number("total_steps", total_steps, "an integer >= 1", 1)
        goodput = n * costs.step_s * (1 - load) / (n * tau + startup_s)
    return Expected(L, P, goodput, tau, load, per_failure)


def young_daly_steps(save_s: float, rate: float, step_s: float) -> float | None:
    """Young's first-order optimum, sqrt(2 x save cost x MTBF), in steps; None without failures or save cost."""
    if rate <= 0 or save_s <= 0:
        return None
    return math.sqrt(2 * save_s / rate) / step_s


@dataclass(frozen=True)
class Advice(Payload):
    local_period: int
    persistent_period: int
    expected: Expected
    feasible: bool  # False: no schedule keeps up with the failures (expected goodput 0)
    young_daly_local: float | None
    young_daly_persistent: float | None
    min_local_period: int
    max_period: int
    notes: list[str] = field(default_factory=list)


def min_local_period(costs: Costs) -> int:
    """The ramdisk holds two local checkpoints: a local save must be finished before the next one starts."""
    return max(1, math.ceil(costs.local_write_s / costs.step_s - 1e-9))


def advise(costs: Costs, rates: FailureRates, total_steps: int | None = None, startup_s: float = 0.0,
           max_period: int | None = None) -> Advice:
    """The integer (L, P), L < P, P a multiple of L, L >= the ramdisk's minimum, P <= the run length, maximising
    expected goodput."""
    if total_steps is not None and (isinstance(total_steps, bool) or not isinstance(total_steps, int)
                                    or total_steps < 2):
        raise SpecError("total_steps", total_steps, "an integer >= 2, or none")
    limit = max_period if max_period is not None else (total_steps or DEFAULT_MAX_PERIOD)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 2:
        raise SpecError("max_period", max_period, "an integer >= 2")
    low = min_local_period(costs)
    notes = []
    if 2 * low > limit:
        raise SpecError("local_write_s", costs.local_write_s,
                        f"a local save shorter than {limit // 2} steps of {costs.step_s}s, so that L < P <= {limit}")

    def value(L: int, k: int) -> float:
        e = expected_goodput(costs, rates, L, L * k, total_steps, startup_s)
        # Past the point where failures swamp the run every schedule scores 0: keep a slope to climb on.
        return e.goodput if e.goodput > 0 else -e.failure_load

    def best_k(L: int) -> tuple[float, int]:
        return _argmax_int(lambda k: value(L, k), 2, limit // L)

    candidates = _geometric(low, limit // 2)
    scored = [(*best_k(L), L) for L in candidates]
    _, _, coarse = max(scored)
    near = range(max(low, int(coarse / 1.2)), min(limit // 2, int(coarse * 1.2) + 1) + 1)
    _, k, L = max((*best_k(L), L) for L in {*near, coarse})
    expected = expected_goodput(costs, rates, L, L * k, total_steps, startup_s)
    if rates.total == 0:
        notes.append("no failures: checkpoint as rarely as allowed")
    if costs.save_local_s == 0 and costs.save_persistent_s == 0:
        notes.append("saves cost nothing: checkpoint as often as allowed")
    if low > 1:
        notes.append(f"L >= {low}: a local save takes {costs.local_write_s:.3g}s and the ramdisk holds two checkpoints")
    feasible = expected.goodput > 0
    if not feasible:
        notes.append("failures come faster than the run recovers: no schedule makes progress")
    return Advice(L, L * k, expected, feasible,
                  young_daly_steps(costs.save_local_s, rates.host_loss, costs.step_s),
                  young_daly_steps(max(0.0, costs.save_persistent_s - costs.save_local_s), rates.slice_loss,
                                   costs.step_s), low, limit, notes)


def _geometric(low: int, high: int, factor: float = 1.15) -> list[int]:
    out, value = [], float(low)
    while value <= high:
        out.append(int(value))
        value = max(value * factor, value + 1)
    if not out or out[-1] != high:
        out.append(high)
    return sorted(set(out))


def _argmax_int(f: Any, low: int, high: int) -> tuple[float, int]:
    """Maximum of a unimodal function over the integers [low, high] (ternary search, then a short scan)."""
    cache: dict[int, float] = {}

    def g(x: int) -> float:
        if x not in cache:
            cache[x] = f(x)
        return cache[x]

    a, b = low, high
    while b - a > 4:
        m1, m2 = a + (b - a) // 3, b - (b - a) // 3
        if g(m1) < g(m2):
            a = m1 + 1
        else:
            b = m2
    best = max(range(a, b + 1), key=lambda x: (g(x), -x))
    return g(best), best


# ---- measurements from earlier runs ----------------------------------------------------------------------
@dataclass(frozen=True)
class Measurements(Payload):
    """What the local workload's events of earlier runs say; None where nothing was seen."""

    step_s: float | None
    save_local_s: float | None
    save_persistent_s: float | None
    local_write_s: float | None
    restore_local_s: float | None
    restore_persistent_s: float | None
    restart_s: float | None
    startup_s: float | None
    failures: dict[str, int]
    exposure_s: float
    local_period: int | None
    persistent_period: int | None
    total_steps: int | None

    def rates(self) -> FailureRates:
        if self.exposure_s <= 0:
            return FailureRates()
        return FailureRates(*(self.failures.get(k, 0) / self.exposure_s for k in ("host_loss", "slice_loss",
                                                                                   "preemption")))

    def costs(self, **overrides: float | None) -> Costs:
        """Measured costs, with any given figure taking precedence; a figure nobody knows is an error."""
        values = {}
        for name in ("step_s", "save_local_s", "save_persistent_s", "restore_local_s", "restore_persistent_s",
                     "restart_s", "local_write_s"):
            given = overrides.get(name)
            values[name] = given if given is not None else getattr(self, name)
        if values["restore_persistent_s"] is None:
            values["restore_persistent_s"] = values["restore_local_s"]  # never fell back: assume alike
        if values["restore_local_s"] is None:
            values["restore_local_s"] = values["restore_persistent_s"]
        if values["save_local_s"] is None:
            values["save_local_s"] = values["save_persistent_s"]
        missing = [k for k, v in values.items() if v is None and k != "local_write_s"]
        if missing:
            raise SpecError(missing[0], None, "a figure measured in events of an earlier run, or given by hand "
                                              f"(mtc advise --{missing[0].replace('_', '-')})")
        values["local_write_s"] = values["local_write_s"] or 0.0
        return Costs(**values)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _period(steps: Iterable[int]) -> int | None:
    """The period of regular saves (they fall on multiples of it): the greatest common divisor of their steps."""
    steps = [s for s in steps if s > 0]
    return math.gcd(*steps) if steps else None


def measure_events(events: Sequence[Mapping[str, Any]]) -> Measurements:
    """Figures from the local workload's events (every process; one run_name, possibly several runs of it).

    Step time: median gap between consecutive steps of one attempt, save steps and first steps left out. Blocking
    save cost: the gap after a save step minus the step time (persistent when a persistent save started on that
    step, else local). Restart: from an attempt's end to its successor's first step, less restore and one step.
    A disrupted attempt is a preemption when it ended with a `preempted` event, a host loss when its successor
    restored from the local tier, else a slice loss.
    """
    events = [e for e in events if "ts" in e and "event" in e]
    timeline = timeline_from_workload_events(events)
    saves: dict[int, set[str]] = {}
    writes: list[float] = []
    for e in events:
        if e["event"] == "save_start" and e.get("step") is not None:
            saves.setdefault(int(e["step"]), set()).add(e.get("tier", "persistent"))
        if e["event"] == "save_end" and e.get("tier") == "local" and e.get("duration_s") is not None:
            writes.append(float(e["duration_s"]))
    preempted_at = {float(e["ts"]) for e in events if e["event"] == "preempted"}
    forced = {int(e["step"]) for e in events if e["event"] in ("preempted", "finish") and e.get("step") is not None}
    by_attempt = _steps_by_attempt(timeline)
    plain, after_save = [], {"local": [], "persistent": []}
    for records in by_attempt.values():
        for (s0, t0), (s1, t1) in zip(records, records[1:]):
            if s1 != s0 + 1:
                continue
            tiers = saves.get(s0)
            if not tiers:
                plain.append(t1 - t0)
            else:
                after_save["persistent" if "persistent" in tiers else "local"].append((t1 - t0))
    step_s = _median(plain)
    save_cost = {tier: (_median([max(0.0, g - step_s) for g in gaps]) if step_s is not None else None)
                 for tier, gaps in after_save.items()}
    restores = {tier: _median([r.end - r.start for r in timeline.restores if r.tier == tier])
                for tier in ("local", "persistent")}
    failures = {"host_loss": 0, "slice_loss": 0, "preemption": 0}
    restart, startup = [], []
    exposure = 0.0
    for index, attempt in enumerate(timeline.attempts):
        exposure += attempt.end - attempt.start
        first = by_attempt.get(index, [])
        restore = sum(r.end - r.start for r in timeline.restores if r.attempt == index)
        previous = timeline.attempts[index - 1] if index else None
        if previous is None or previous.outcome == "finished":
            if first and step_s is not None:
                startup.append(max(0.0, first[0][1] - attempt.start - restore - step_s))
            continue
        exposure += max(0.0, attempt.start - previous.end)  # downtime between attempts of one run
        if first and step_s is not None:
            restart.append(max(0.0, first[0][1] - previous.end - restore - step_s))
        tiers = [r.tier for r in timeline.restores if r.attempt == index]
        if previous.end in preempted_at:
            failures["preemption"] += 1
        elif "local" in tiers:
            failures["host_loss"] += 1
        else:
            failures["slice_loss"] += 1
    # forced saves (on preemption, at the last step) fall off the schedule
    persistent_steps = [s for s, t in saves.items() if "persistent" in t and s not in forced]
    local_steps = [s for s, t in saves.items() if "local" in t and s not in forced]
    return Measurements(
        step_s, save_cost["local"], save_cost["persistent"], _median(writes), restores["local"],
        restores["persistent"], _median(restart), _median(startup), failures, exposure,
        _period(local_steps), _period(persistent_steps), max((r.step for r in timeline.steps), default=None))


def _steps_by_attempt(timeline: Timeline) -> dict[int, list[tuple[int, float]]]:
    out: dict[int, list[tuple[int, float]]] = {}
    for rec in sorted(timeline.steps, key=lambda r: r.end):
        out.setdefault(rec.attempt, []).append((rec.step, rec.end))
    return out


# ---- after a run: the line the goodput task logs, and applying stored advice ------------------------------
def advice_after_run(events: Sequence[Mapping[str, Any]], rates: FailureRates | None = None) -> dict[str, Any]:
    """Advice from a run_name's events (failure rates measured there unless given), as a JSON-able payload with
    the one-line summary under `line`; `advice` is None when the events cannot support one (the reason in `line`)."""
    measured = measure_events(events)
    rates = rates if rates is not None else measured.rates()
    out: dict[str, Any] = {"measurements": measured.to_payload(), "advice": None}
    try:
        costs = measured.costs()
    except SpecError as err:
        out["line"] = f"no advice: {err.field} was not measured"
        return out
    if rates.total == 0:
        out["line"] = "no advice: no failure in this run_name's events, nothing to trade checkpoints against"
        return out
    steps = measured.total_steps if measured.total_steps and measured.total_steps >= 2 else None
    startup = measured.startup_s or 0.0
    try:
        advice = advise(costs, rates, steps, startup)
    except SpecError as err:
        out["line"] = f"no advice: {err}"
        return out
    out["advice"] = advice.to_payload()
    out["rates"] = asdict(rates)
    this_run = measured_goodput(events, costs.step_s)
    out["this_run_goodput"] = this_run
    current = ""
    if measured.local_period and measured.persistent_period and measured.local_period < measured.persistent_period:
        now = expected_goodput(costs, rates, measured.local_period, measured.persistent_period, steps, startup)
        out["current"] = asdict(now)
        current = f"; model for this run's L={now.local_period}, P={now.persistent_period}: {now.goodput:.1%}"
    shown = f"{this_run:.1%}" if this_run is not None else "unknown"
    out["line"] = (f"with L={advice.local_period}, P={advice.persistent_period} expected goodput "
                   f"{advice.expected.goodput:.1%} (this run: {shown}{current})")
    return out


def measured_goodput(events: Sequence[Mapping[str, Any]], step_s: float) -> float | None:
    """The model's goodput, measured: steps of the last run x step time / its wall time (first start to finish)."""
    events = [e for e in events if "ts" in e and "event" in e]
    ids = [e["process"] for e in events if e.get("process") is not None]
    events = sorted((e for e in events if e.get("process") == (min(ids) if ids else None)),
                    key=lambda e: float(e["ts"]))  # one process: every process records the same run
    finishes = [e for e in events if e["event"] == "finish" and e.get("step") is not None]
    if not finishes:
        return None
    end = finishes[-1]
    earlier = [float(e["ts"]) for e in finishes if float(e["ts"]) < float(end["ts"])]
    begin = max(earlier, default=float("-inf"))  # the run after the previous finish
    starts = [float(e["ts"]) for e in events if e["event"] == "start" and begin < float(e["ts"])]
    if not starts or float(end["ts"]) <= starts[0]:
        return None
    first_restore = next((int(e["step"]) for e in events if e["event"] == "restore" and float(e["ts"]) >= starts[0]
                          and e.get("step") is not None), 0)
    steps = int(end["step"]) - (first_restore if _resumed(events, starts[0]) else 0)
    return steps * step_s / (float(end["ts"]) - starts[0])


def _resumed(events: Sequence[Mapping[str, Any]], start: float) -> bool:
    """Whether the run's first attempt restored (it resumed a run that had already finished steps)."""
    for e in events:
        if float(e["ts"]) < start:
            continue
        if e["event"] == "restore":
            return True
        if e["event"] == "step":
            return False
    return False


def apply_advice(params: Mapping[str, Any], payload: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
    """Params for the next run with a stored advice's periods applied, and a sentence saying what happened."""
    params = dict(params)
    advice = (payload or {}).get("advice") if isinstance(payload, Mapping) else None
    if not advice:
        return params, "apply_advice: no stored advice for this run_name yet; periods as given"
    L, P = advice.get("local_period"), advice.get("persistent_period")
    _check_periods(L, P)
    checkpointing = dict(params.get("checkpointing") or {})  # the run description's section (core.definition.description.run)
    before = (checkpointing.get("local_checkpoint_period"), checkpointing.get("checkpoint_period"))
    params["checkpointing"] = {**checkpointing, "local_checkpoint_period": L, "checkpoint_period": P}
    return params, f"apply_advice: local_checkpoint_period, checkpoint_period {before} -> ({L}, {P})"


# ---- `mtc advise`: figures given by hand and/or measured, one report ---------------------------------------


def advice_report(measured: Measurements | None, given: Mapping[str, Any], rates: FailureRates | None,
                  total_steps: int | None = None, startup_s: Any = None,
                  current: tuple[int, int] | None = None) -> dict[str, Any]:
    """Advice from measurements and/or hand-given figures (a given figure wins), as a JSON-able payload with the
    human lines under `lines`. Failure rates: given, else measured; none at all is an error."""
    overrides = {k: (finite_number(k, v, "a number >= 0 (seconds)", 0) if v is not None else None)
                 for k, v in given.items()}
    empty = Measurements(None, None, None, None, None, None, None, None, {}, 0.0, None, None, None)
    measured = measured or empty
    costs = measured.costs(**overrides)
    if rates is None:
        if not measured.exposure_s:
            raise SpecError("failure rates", None, "--host-mtbf-s / --slice-mtbf-s / --preemption-mtbf-s, or "
                                                   "--events of earlier runs with failures in them")
        rates = measured.rates()
    if total_steps is None and measured.total_steps and measured.total_steps >= 2:
        total_steps = measured.total_steps
    startup = finite_number("startup_s", startup_s, "a number >= 0 (seconds)", 0) if startup_s is not None else (
        measured.startup_s or 0.0)
    if current is None and measured.local_period and measured.persistent_period \
            and measured.local_period < measured.persistent_period:
        current = (measured.local_period, measured.persistent_period)
    advice = advise(costs, rates, total_steps, startup)
    now = expected_goodput(costs, rates, *current, total_steps, startup) if current else None
    e = advice.expected

    def mtbf(rate: float) -> str:
        return f"{1 / rate:,.0f}s" if rate > 0 else "never"

    lines = [
        f"advice: local_checkpoint_period={advice.local_period}, checkpoint_period={advice.persistent_period}"
        f" -> expected goodput {e.goodput:.1%}" + ("" if advice.feasible else " (no schedule keeps up)"),
    ]
    if now is not None:
        lines.append(f"now:    local_checkpoint_period={now.local_period}, checkpoint_period={now.persistent_period}"
                     f" -> expected goodput {now.goodput:.1%}")
    yd_l = f"{advice.young_daly_local:.1f}" if advice.young_daly_local else "-"
    yd_p = f"{advice.young_daly_persistent:.1f}" if advice.young_daly_persistent else "-"
    lines += [
        f"Young/Daly sqrt(2 x save cost x MTBF): L ~ {yd_l} steps, P ~ {yd_p} steps",
        f"inputs: step {costs.step_s:.4g}s; blocking save local {costs.save_local_s:.4g}s, persistent step "
        f"{costs.save_persistent_s:.4g}s; restore local {costs.restore_local_s:.4g}s, persistent "
        f"{costs.restore_persistent_s:.4g}s; restart {costs.restart_s:.4g}s; start-up {startup:.4g}s; "
        f"run {total_steps if total_steps else 'unbounded'} steps",
        f"failures: MTBF host loss {mtbf(rates.host_loss)}, slice loss {mtbf(rates.slice_loss)}, "
        f"preemption {mtbf(rates.preemption)}",
        f"per failure: host loss {e.per_failure_s['host_loss']:.4g}s, slice loss "
        f"{e.per_failure_s['slice_loss']:.4g}s, preemption {e.per_failure_s['preemption']:.4g}s "
        f"(failure load {e.failure_load:.3f} of wall time)",
        *[f"note: {note}" for note in advice.notes],
    ]
    return {"advice": advice.to_payload(), "current": asdict(now) if now else None, "costs": asdict(costs),
            "rates": asdict(rates), "total_steps": total_steps, "startup_s": startup,
            "measurements": measured.to_payload() if measured is not empty else None, "lines": lines}
