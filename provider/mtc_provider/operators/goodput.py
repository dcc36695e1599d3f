"""GoodputReportOperator: the goodput report at the end of a training DAG, as XCom and as a PNG chart.

Local target: the workload's JSON-lines event files (`<base>/<run_name>/events/*.jsonl`), step-grained.
GKE: checkpoint commit times from the store plus the attempts (JobSet restarts) handed in, e.g. from the
launch task's XCom as `[{"start": ts, "end": ts, "outcome": "disrupted"|"finished"|"failed"}, ...]`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from airflow.sdk import BaseOperator, Context

from mtc_provider.adapters.checkpoint_stores import open_store
from mtc_provider.core.errors import SpecError
from mtc_provider.core.goodput import (
    Attempt,
    GoodputReport,
    Timeline,
    compute_goodput,
    timeline_from_checkpoints,
    timeline_from_workload_events,
)


def attempts_from_dicts(items: Iterable[Mapping[str, Any]]) -> list[Attempt]:
    out = []
    for index, item in enumerate(items):
        try:
            out.append(Attempt(float(item["start"]), float(item["end"]), str(item.get("outcome", "disrupted"))))
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"attempts[{index}]", item, "a mapping with numeric start and end, and an outcome") from None
    return out


def render_chart(timeline: Timeline, report: GoodputReport, path: str | os.PathLike, title: str = "") -> str:
    """Step vs time, with checkpoints, restores and faults (ends of disrupted attempts) marked."""
    try:
        import matplotlib  # lazy: only the report task pays for it
    except ImportError as exc:  # the chart is an extra: GKE-only installs leave it out
        raise ImportError("the goodput chart needs matplotlib: pip install 'airflow-provider-mtc[chart]'") from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    origin = min((a.start for a in timeline.attempts), default=0.0)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    try:
        for index in range(len(timeline.attempts)):
            records = sorted((s for s in timeline.steps if s.attempt == index), key=lambda s: s.end)
            if records:
                ax.plot([r.end - origin for r in records], [r.step for r in records], "-", lw=1.5,
                        label="steps" if index == 0 else None, color="tab:blue")
        saves = [s for s in timeline.saves if s.tier == "persistent"]
        if saves:
            ax.scatter([(s.end or s.start) - origin for s in saves], [s.step for s in saves], marker="s", s=18,
                       color="tab:green", label="persistent checkpoints", zorder=3)
        if timeline.restores:
            ax.scatter([r.end - origin for r in timeline.restores], [r.step for r in timeline.restores], marker="^",
                       s=40, color="tab:orange", label="restores", zorder=3)
        for number, attempt in enumerate(a for a in timeline.attempts if a.outcome != "finished"):
            ax.axvline(attempt.end - origin, color="tab:red", ls="--", lw=1, label="faults" if number == 0 else None)
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("step")
        ax.set_title(title or f"goodput {report.goodput:.1%} over {report.elapsed_s:.0f}s, "
                     f"{report.disruptions} disruption(s)")
        ax.legend(loc="upper left", fontsize=8)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return str(path)


class GoodputReportOperator(BaseOperator):
    """Compute goodput for a run and draw its chart; returns the report as XCom (plus `chart_path`).

    :param checkpoint_dir: the run's persistent checkpoint directory (templated).
    :param events_dir: the local workload's event directory; when it holds events they are used (templated).
    :param attempts: GKE attempts (list of {start, end, outcome}), e.g. pulled from the launch task (templated).
    :param chart_path: where to write the PNG; default beside the events, else in the temp directory (templated).
    :param gcp_conn_id: the Google Cloud connection that reads a gs:// checkpoint directory.
    """

    template_fields: Sequence[str] = ("checkpoint_dir", "events_dir", "attempts", "chart_path")

    def __init__(self, *, checkpoint_dir: str, events_dir: str | None = None,
                 attempts: list[Mapping[str, Any]] | str | None = None, chart_path: str | None = None,
                 gcp_conn_id: str = "google_cloud_default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpoint_dir = checkpoint_dir
        self.events_dir = events_dir
        self.attempts = attempts
        self.chart_path = chart_path
        self.gcp_conn_id = gcp_conn_id

    def build_timeline(self) -> tuple[Timeline, str]:
        if self.events_dir:
            from mtc_provider.local.workload_events import read_events

            events = read_events(self.events_dir)
            if events:
                return timeline_from_workload_events(events), "workload events"
        attempts = attempts_from_dicts(self.attempts or []) if not isinstance(self.attempts, str) else []
        checkpoints = [(info.step, info.commit_time) for info in
                       open_store(self.checkpoint_dir, self.gcp_conn_id).finalized(self.checkpoint_dir)
                       if info.commit_time is not None]
        if not attempts and checkpoints:  # nothing known about restarts: one attempt spanning the checkpoints
            attempts = [Attempt(checkpoints[0][1], checkpoints[-1][1], "finished")]
        return timeline_from_checkpoints(attempts, checkpoints), "checkpoint commit times"

    def execute(self, context: Context) -> dict[str, Any]:
        timeline, source = self.build_timeline()
        report = compute_goodput(timeline)
        path = self.chart_path or (
            os.path.join(self.events_dir, "goodput.png") if self.events_dir
            else os.path.join(tempfile.gettempdir(), f"mtc-goodput-{context['run_id']}.png".replace(":", "_")))
        render_chart(timeline, report, path)
        self.log.info("goodput %.1f%% (%s): productive %.0fs of %.0fs; badput %s; recovery %s; chart %s",
                      100 * report.goodput, source, report.productive_s, report.elapsed_s, report.badput_s,
                      report.recovery_s, path)
        return {**report.to_payload(), "source": source, "chart_path": path}
