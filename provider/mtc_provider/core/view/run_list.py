"""One row of the runs list (pure): the figures an on-call engineer scans across runs, from what the run's own page
reads (core.view.run_page.run_view over the XComs: progress, attempts, ledger), so the list and the page agree."""

from __future__ import annotations

from typing import Any

from mtc_provider.core.measure.progress_report import format_duration
from mtc_provider.core.view.run_page import RunFacts, run_view

COLUMNS = ("state", "step", "rate", "ETA", "goodput", "interruptions", "newest restorable step")


def interruptions_total(shown: dict[str, Any]) -> int:
    """Interruptions the run survived: the ledger's, each of its kinds, when the run has one; else the attempt
    records' graceful and failed ends and every in-cluster restart (live ones included)."""
    counts = shown["interruptions"]
    if counts.get("by_kind"):
        return sum(counts["by_kind"].values())
    return counts.get("graceful", 0) + counts.get("failed", 0) + counts.get("restarts", 0)


def run_row(records: RunFacts) -> dict[str, str]:
    """The run's row: each of COLUMNS in words ('' where nothing is known)."""
    shown = run_view(records)
    live, goodput = shown["live"], shown["goodput"] or {}
    state = records.run_state or ""
    if shown["waiting_for"]:
        state += f" (waiting for {shown['waiting_for'].split(':')[0].split(' (')[0]})"
    step = live["step"]
    target = live["target_step"]
    figure = goodput.get("goodput")
    restorable = live.get("newest_restorable")
    return {
        "state": state,
        "step": "" if step is None else f"{step:,}" + (f" / {target:,} ({live['percent']}%)" if target else ""),
        "rate": "" if live["steps_per_hour"] is None else f"{live['steps_per_hour']:,.0f} steps/h",
        "ETA": "" if not shown["running"] else live["eta"] if live["eta_seconds"] is None
        else format_duration(live["eta_seconds"]),
        "goodput": "" if figure is None else f"{100 * figure:.1f}%" + ("" if goodput.get("final") else " so far"),
        "interruptions": str(interruptions_total(shown)),
        "newest restorable step": "" if restorable is None
        else f"{restorable:,} ({live.get('newest_restorable_tier') or 'tier not known'})",
    }
