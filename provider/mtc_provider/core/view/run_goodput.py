"""Goodput of a run from its intervals (pure, plain values): the run ledger when the run has one, else its attempt
records and the measured step time (docs/run-view.md says how each figure is counted).

From the ledger each start of the workload is an interval; its productive time runs from its first step to its
end, less the steps the next start re-did. Without a ledger the api-server has only a handful of (step, time)
points per attempt on GKE (on a day-long attempt the first is its end), so productive time is the kept steps at the
measured step time, capped at the attempt's span, and the rest is `other`; no step time, no figure.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from mtc_provider.core.attempt.ledger import RunLedger, StepPoint

BADPUT_KEYS = ("startup", "restore", "wasted_progress", "downtime", "waiting_for_capacity", "other")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_ledger(ledger: RunLedger | Mapping[str, Any]) -> RunLedger:
    """The typed ledger of its dict form (core.attempt.ledger.RunLedger.from_dict: SpecError naming the field)."""
    return ledger if isinstance(ledger, RunLedger) else RunLedger.from_dict(ledger)


def measured_step_seconds(steps: Sequence[StepPoint]) -> float | None:
    """The run's step time: the median of the steps' own `step_seconds`, else of the samples' time per step."""
    own = [p.step_seconds for p in steps if p.step_seconds and p.step_seconds > 0]
    if own:
        return statistics.median(own)
    gaps = [(b.at - a.at) / (b.step - a.step) for a, b in zip(steps, steps[1:]) if b.step > a.step and b.at > a.at]
    return statistics.median(gaps) if gaps else None


def _report(elapsed: float, productive: float, badput: dict[str, float], recovery: list[float], disruptions: int,
            last_step: int | None, step_s: float | None, method: str) -> dict[str, Any]:
    badput["other"] = max(0.0, badput.get("other", 0.0))
    return {"goodput": productive / elapsed if elapsed > 0 else 0.0, "productive_s": productive, "elapsed_s": elapsed,
            "badput_s": {k: round(v, 3) for k, v in badput.items()}, "recovery_s": recovery, "disruptions": disruptions,
            "last_productive_step": last_step, "step_seconds": step_s, "method": method}


def goodput_from_ledger(ledger: RunLedger | Mapping[str, Any], *, end: float, begin: float | None = None,
                        waiting: bool = False) -> dict[str, Any]:
    """The run's goodput from its ledger (typed, or its dict form: SpecError naming a bad field), over [begin, end]
    (begin: the first launch, default the first start; end: now while it runs, else its end). `waiting`: the run
    waits for capacity now (its wait is shown as such)."""
    facts = as_ledger(ledger)
    starts = sorted(facts.starts, key=lambda s: (s.at, s.key))
    steps = sorted(facts.steps, key=lambda p: p.key)
    interruptions = sorted(facts.interruptions, key=lambda i: i.at)
    step_s = measured_step_seconds(steps)
    first_at = starts[0].at if starts else end
    begin = first_at if begin is None else min(float(begin), first_at)
    end = max(float(end), begin)
    badput = dict.fromkeys(BADPUT_KEYS, 0.0)
    if not starts:
        badput["waiting_for_capacity" if waiting else "startup"] = max(0.0, end - begin)
        return _report(max(0.0, end - begin), 0.0, badput, [], 0, None, step_s, "ledger")
    badput["startup"] += starts[0].at - begin
    productive, recovery, spans = 0.0, [], []
    for index, start in enumerate(starts):
        following = starts[index + 1].at if index + 1 < len(starts) else end
        ended = [i for i in interruptions if start.at < i.at <= following]
        stop = ended[0].at if ended else following
        inside = [p for p in steps if start.at <= p.at <= stop]
        if waiting and index + 1 == len(starts) and not ended:  # it stopped training when it lost its capacity
            stop = max([start.at] + [p.at for p in inside])
        first = start.first_step_at
        if first is None and inside:
            first = inside[0].at
        first = None if first is None else min(max(first, start.at), stop)
        reached = max([p.step for p in inside] + [i.step for i in ended if i.step is not None]
                      + ([start.restored_step] if start.restored_step is not None else []), default=None)
        spans.append({"at": start.at, "first": first, "stop": stop, "reached": reached, "interrupted": bool(ended)})
        training_from = first if first is not None else stop
        restore = min(start.restore_seconds or 0.0, training_from - start.at)
        badput["restore"] += restore
        badput["startup"] += training_from - start.at - restore
        productive += stop - training_from
        gap = following - stop
        badput["waiting_for_capacity" if waiting and index + 1 == len(starts) else "downtime"] += gap
        if index:
            previous = spans[index - 1]
            if first is not None:
                recovery.append(first - previous["stop"])
            if start.restored_step is not None and previous["reached"] is not None and step_s:
                trained = previous["stop"] - (previous["first"] if previous["first"] is not None else previous["stop"])
                lost = min(max(0, previous["reached"] - start.restored_step) * step_s, trained)
                badput["wasted_progress"] += lost
                productive -= lost
    elapsed = end - begin
    badput["other"] = elapsed - productive - sum(badput.values())
    disruptions = len(starts) - 1 + (1 if spans[-1]["interrupted"] else 0)
    last_step = max([p.step for p in steps] + [s["reached"] for s in spans if s["reached"] is not None], default=None)
    return _report(elapsed, productive, badput, recovery, disruptions, last_step, step_s, "ledger")


def goodput_from_attempts(attempts: Sequence[Mapping[str, Any]], *, end: float, step_seconds: float | None,
                          begin: float | None = None, waiting: bool = False) -> dict[str, Any] | None:
    """The run's goodput without a ledger: `attempts` as {start, end (None: going on), from_step, kept_step}, by
    start; None when no attempt started or no step time was measured (the module's docstring says why)."""
    spans = sorted((a for a in attempts if _number(a.get("start")) is not None), key=lambda a: float(a["start"]))
    if not spans or not step_seconds or step_seconds <= 0:
        return None
    begin = min(float(begin), float(spans[0]["start"])) if begin is not None else float(spans[0]["start"])
    badput = dict.fromkeys(BADPUT_KEYS, 0.0)
    badput["startup"] = float(spans[0]["start"]) - begin
    productive = 0.0
    last_step = None
    for index, attempt in enumerate(spans):
        start = float(attempt["start"])
        stop = min(_number(attempt.get("end")) or end, end)
        kept, since = attempt.get("kept_step"), attempt.get("from_step") or 0
        steps = max(0, kept - since) if isinstance(kept, int) else 0
        useful = min(max(0.0, stop - start), steps * step_seconds)
        productive += useful
        open_attempt = _number(attempt.get("end")) is None
        badput["waiting_for_capacity" if waiting and open_attempt else "other"] += max(0.0, stop - start) - useful
        if isinstance(kept, int):
            last_step = kept if last_step is None else max(last_step, kept)
        if index + 1 < len(spans):
            badput["downtime"] += max(0.0, float(spans[index + 1]["start"]) - stop)
        elif waiting and not open_attempt:
            badput["waiting_for_capacity"] += max(0.0, end - stop)
    elapsed = max(end - begin, productive)
    disruptions = len(spans) - 1
    return _report(elapsed, productive, badput, [], disruptions, last_step, step_seconds, "attempts")


def ledger_end(ledger: RunLedger) -> float | None:
    """The time of the ledger's newest fact (a start, a step, a save, an interruption, a decision), or None."""
    times = [s.at for s in ledger.starts] + [s.first_step_at for s in ledger.starts if s.first_step_at] + [
        item.at for group in (ledger.steps, ledger.saves, ledger.interruptions, ledger.decisions) for item in group]
    return max(times) if times else None


def timeline_from_ledger(ledger: RunLedger | Mapping[str, Any], *, end: float):
    """The run's Timeline (core.view.goodput) from its ledger, for the chart: one interval per start of the pods
    (to its interruption, else the next start, else `end`), its steps, its restore (tier, duration) and the saves
    of every tier. An interval ended by an interruption is `disrupted` (a failure kind `failed`), the last one
    `finished` once the ledger holds a `succeed` decision, else `running`; None without a start."""
    from mtc_provider.core.attempt.ledger import FAILURE, HOST_LOSS
    from mtc_provider.core.view.goodput import Attempt, Restore, Save, StepRecord, Timeline

    facts = as_ledger(ledger)
    starts = sorted(facts.starts, key=lambda s: (s.at, s.key))
    if not starts:
        return None
    interruptions = sorted(facts.interruptions, key=lambda i: i.at)
    timeline = Timeline()
    for index, start in enumerate(starts):
        following = starts[index + 1].at if index + 1 < len(starts) else max(end, start.at)
        ended = next((i for i in interruptions if start.at < i.at <= following), None)
        stop = ended.at if ended else following
        outcome = ("failed" if ended.kind in (FAILURE, HOST_LOSS) else "disrupted") if ended else (
            "finished" if any(d.kind == "succeed" for d in facts.decisions) else "running")
        timeline.attempts.append(Attempt(start.at, stop, outcome))
        timeline.steps += [StepRecord(index, p.step, p.at) for p in facts.steps if start.at <= p.at <= stop]
        if start.restored_step is not None:
            done = start.first_step_at or start.at
            timeline.restores.append(Restore(index, start.restored_step, done - (start.restore_seconds or 0.0), done,
                                             start.restored_tier or "persistent"))
    timeline.saves = [Save(s.step, s.at, end=s.at, tier=s.tier) for s in facts.saves if s.complete]
    return timeline


def chart_marks(ledger: RunLedger) -> dict[str, list[tuple[float, Any]]]:
    """What the chart draws from the ledger beside its Timeline: interruptions (time, kind), loss (time, loss)."""
    return {"interruptions": [(i.at, i.kind) for i in ledger.interruptions],
            "loss": [(p.at, p.loss) for p in sorted(ledger.steps, key=lambda p: p.key) if p.loss is not None]}
