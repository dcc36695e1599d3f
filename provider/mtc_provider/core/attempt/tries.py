"""Airflow tries of the launch task that never reached the provider (pure).

A try can end before any provider code runs: its resume goes through the Execution API, so an api-server that is
down or slow to answer its first request fails the try in the Task SDK (`ConnectError`/`ReadTimeout`, a task log
with only `::group::Pre Execute`), and a worker lost before the start does too. Such a try submits nothing and
records no attempt, so "2 attempts" stood beside "5 tries" with nothing to say why. Each try the provider reached
records its number in the attempts it submitted or reattached to (`"try"` in the run lock and the run's record).
Airflow's tries come from its REST API (`GET /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries`,
one entry per try with `try_number` and `state`), or from the task instance history in the run view.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

ENDED = ("failed", "up_for_retry", "upstream_failed", "skipped", "removed")  # a try Airflow ended; not success


def unreached_tries(tries: Iterable[Mapping[str, Any]], attempts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tries Airflow ended with no attempt of their own: [{"try": n, "state": s, "reason": why}], oldest
    first. A try still running, deferred or queued may yet submit: not counted; nor one that succeeded."""
    reached = {int(a["try"]) for a in attempts if isinstance(a.get("try"), int) and not isinstance(a["try"], bool)}
    out = []
    for entry in sorted(tries, key=lambda t: int(t.get("try_number") or 0)):
        number, state = int(entry.get("try_number") or 0), str(entry.get("state") or "none").lower()
        if number > 0 and number not in reached and state in ENDED:
            out.append({"try": number, "state": state, "reason": _why(state)})
    return out


def _why(state: str) -> str:
    if state in ("failed", "up_for_retry"):
        return ("no attempt recorded: the try ended before the launch submitted or watched one (most often the "
                "Execution API or the worker failed before the provider ran: the try's log ends at Pre Execute; "
                "else the launch refused, and its log says why)")
    return f"Airflow set it {state} without running it"


def tries_line(total: int, attempts: int, unreached: list[Mapping[str, Any]]) -> str:
    """`5 Airflow tries, 2 attempts; 3 tries never reached the provider: try 2 (failed), ...`."""
    text = f"{total} Airflow tr{'y' if total == 1 else 'ies'}, {attempts} attempt{'' if attempts == 1 else 's'}"
    if not unreached:
        return text
    listed = ", ".join(f"try {t['try']} ({t['state']})" for t in unreached)
    return (f"{text}; {len(unreached)} tr{'y' if len(unreached) == 1 else 'ies'} never reached the provider: "
            f"{listed}: {unreached[0]['reason']}")
