"""GoodputReportOperator: the goodput report at the end of a training DAG, as XCom and as a PNG chart.

Sources, richest first (docs/goodput.md): the run ledger the launch task pushed (the same figure the run view and
`mtc status` show); the local workload's event files; on GKE, checkpoint commit times beside the attempts the launch
task recorded, where in multi-tier mode (no persistent checkpoints) the newest complete replicator backup is one
coarse point at the last attempt's end, since the listing gives its step, not its time. On GKE the chart is written
next to the checkpoints and opened from the "Goodput chart" extra link. With `goodput_recording`, MaxText's own
figures (ml-goodput-measurement's `GoodputCalculator`) go beside ours under `library`.
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from airflow.sdk import BaseOperator, Context

from mtc_provider.adapters import metrics
from mtc_provider.core.attempt.outcomes import DISRUPTED, FAILED_OUTCOME, FINISHED
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.links.goodput import GoodputChartLink, chart_url as chart_link_url

if TYPE_CHECKING:  # the goodput core and the stores are imported where they run: DAG files stay light
    from mtc_provider.core.attempt.ledger import RunLedger
    from mtc_provider.core.view.goodput import Attempt, GoodputReport, Timeline


LEDGER_SOURCE = "run ledger"


def parse_attempts(value: Any, now: float | None = None) -> list[Attempt]:
    """Attempts as handed in: attempt records (core.attempt.attempt_records; at least `start`; an attempt without
    `end` still runs, until `now`), or the text a Jinja template renders of them (JSON or a Python literal)."""
    from mtc_provider.core.attempt.attempt_records import read_attempts
    from mtc_provider.core.view.goodput import Attempt

    if value in (None, "", "None"):
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise SpecError("attempts", value, "a list of {start, end, outcome} records") from None
    out = []
    for index, record in enumerate(read_attempts(value, "attempts")):
        if record.start is None:
            raise SpecError(f"attempts[{index}].start", None, "epoch seconds")
        end = record.end if record.end is not None else now if now is not None else time.time()
        out.append(Attempt(float(record.start), float(end), record.outcome or DISRUPTED))
    return out


def chart_span(timeline: Timeline) -> tuple[float, float]:
    """(first start, last end) of the timeline's intervals: the chart's x axis."""
    return min(a.start for a in timeline.attempts), max(a.end for a in timeline.attempts)


def render_chart(timeline: Timeline, report: GoodputReport, path: str | os.PathLike, title: str = "",
                 interruptions: Sequence[tuple[float, str]] = (), loss: Sequence[tuple[float, float]] = ()) -> str:
    """Step (and `loss`, (time, loss), on a second axis) over wall-clock time (UTC) for the whole run: each
    interval of the timeline shaded, checkpoints by tier, restores, and the interruptions, `(time, kind)` of the
    run ledger (graceful preemptions apart from failures), else the ends of disrupted intervals. Lines, not
    markers, so a week of 2000 points stays readable. The PNG's `Description` names what is drawn and the span."""
    try:
        import matplotlib  # lazy: only the report task pays for it
    except ImportError as exc:  # the chart is an extra: GKE-only installs leave it out
        from mtc_provider.core.basics.install import install_line

        raise ImportError(f"the goodput chart needs matplotlib: {install_line('chart')} (after make dist)") from exc

    matplotlib.use("Agg")
    import datetime

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    from mtc_provider.core.attempt.ledger import PREEMPTION, PREEMPTION_NEW_ATTEMPT  # graceful, apart from failures

    def when(t: float) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc)

    fig, ax = plt.subplots(figsize=(11, 4.8))
    try:
        for index, attempt in enumerate(timeline.attempts):  # each start of the pods, shaded in turn
            ax.axvspan(when(attempt.start), when(attempt.end), color="tab:blue" if index % 2 else "tab:cyan",
                       alpha=0.08, lw=0, label="intervals (starts of the pods)" if index == 0 else None)
        for index in range(len(timeline.attempts)):
            records = sorted((s for s in timeline.steps if s.attempt == index), key=lambda s: s.end)
            if records:
                ax.plot([when(r.end) for r in records], [r.step for r in records], "-", lw=1.5,
                        marker="." if len(records) < 3 else None,  # coarse points (GKE) stay visible
                        label="step" if index == 0 else None, color="tab:blue")
        styles = {"persistent": ("s", 18, "tab:green", "persistent checkpoints"),
                  "replicator": ("D", 14, "tab:olive", "replicator backups"),
                  "local": ("o", 14, "tab:purple", "local-tier checkpoints")}  # the emergency tier: what MTC is about
        for tier, (marker, size, color, label) in styles.items():
            saves = [s for s in timeline.saves if s.tier == tier]
            if saves:
                ax.scatter([when(s.end or s.start) for s in saves], [s.step for s in saves], marker=marker, s=size,
                           facecolors="none" if tier == "local" else color, edgecolors=color, label=label, zorder=3)
        if timeline.restores:
            ax.scatter([when(r.end) for r in timeline.restores], [r.step for r in timeline.restores], marker="^",
                       s=50, color="tab:orange", label="restores", zorder=4)
        marks = list(interruptions) or [(a.end, "failure" if a.outcome == FAILED_OUTCOME else "fault")
                                        for a in timeline.attempts if a.outcome in (DISRUPTED, FAILED_OUTCOME)]
        labelled: set[str] = set()
        for at, kind in sorted(marks):
            graceful = kind in (PREEMPTION, PREEMPTION_NEW_ATTEMPT)
            label = "graceful preemptions" if graceful else "failures" if kind != "fault" else "faults"
            ax.axvline(when(at), color="tab:orange" if graceful else "tab:red", ls=":" if graceful else "--", lw=1,
                       label=None if label in labelled else label)
            labelled.add(label)
        ax.set_ylabel("step")
        ax.set_xlabel("time (UTC)")
        locator = mdates.AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=datetime.timezone.utc))
        start, end = chart_span(timeline)
        ax.set_xlim(when(start), when(end))
        handles, labels = ax.get_legend_handles_labels()
        if loss:
            twin = ax.twinx()
            twin.plot([when(t) for t, _ in loss], [v for _, v in loss], "-", lw=0.8, color="tab:gray", alpha=0.8,
                      label="loss")
            twin.set_ylabel("loss")
            more_handles, more_labels = twin.get_legend_handles_labels()
            handles, labels = handles + more_handles, labels + more_labels
        from mtc_provider.core.measure.progress_report import format_duration

        title = title or (f"goodput {report.goodput:.1%} over {format_duration(report.elapsed_s)}, "
                          f"{report.disruptions} disruption(s)")
        ax.set_title(title)
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.07, 1.0), fontsize=8)  # beside: never on a line
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        span = f"{when(start):%Y-%m-%dT%H:%M:%SZ} - {when(end):%Y-%m-%dT%H:%M:%SZ}"
        fig.savefig(path, dpi=100, bbox_inches="tight",  # PNG tEXt chunks: what is drawn, over which span
                    metadata={"Title": title, "Description": f"drawn: {'; '.join(labels)}; span: {span}"})
    finally:
        plt.close(fig)
    return str(path)


class GoodputReportOperator(BaseOperator):
    """Compute goodput for a run and draw its chart; returns the report as XCom (plus `chart_path`).

    :param checkpoint_dir: the run's persistent checkpoint directory (templated).
    :param events_dir: the local workload's event directory; when it holds events they are used (templated).
    :param attempts: GKE attempts (the launch task's `attempts` XCom, or a list of {start, end, outcome}), or its
        rendered text (templated).
    :param attempts_task_id: pull the attempts from this launch task's `attempts` XCom (when `attempts` is unset).
    :param chart_path: where to write the PNG; default beside the events, else next to the checkpoints (a
        gs:// checkpoint directory gets `<run>/goodput/<run id>.png` in its bucket), else the temp directory.
    :param gcp_conn_id: the Google connection for GCS reads and the chart upload (templated).
    :param impersonation_chain: service account(s) to impersonate for those calls (templated).
    :param goodput_recording: MaxText recorded goodput for this run (`enable_goodput_recording=true`): read it back
        with ml-goodput-measurement (the `goodput` extra) through the same Google connection (templated; default
        off). Its figures never replace ours; a failure to read them is a warning.
    :param goodput_run_name: the MaxText run_name the records carry as job name (templated; default: the run
        folder of `checkpoint_dir`, `<base>/<run_name>/checkpoints`).
    :param goodput_logger_name: the Cloud Logging logger (templated; default MaxText's `goodput_<run_name>`).
    :param goodput_reader_factory: (job_name, logger_name) -> a reader the library's calculator takes as its
        `cloud_logger`; default: the library's reader over the Google connection.
    :param checkpointing: the run's checkpointing section (templated); in multi-tier mode the replicator's complete
        backups are read as well (sensors.checkpoint.replicator_backups). None: persistent checkpoints only.
    :param slices: the run's slices (templated): how many nodes a backup must cover.
    """

    template_fields: Sequence[str] = ("checkpoint_dir", "events_dir", "attempts", "attempts_task_id", "chart_path",
                                      "gcp_conn_id", "impersonation_chain", "goodput_recording", "goodput_run_name",
                                      "goodput_logger_name", "checkpointing", "slices")
    operator_extra_links = (GoodputChartLink(),)

    def __init__(self, *, checkpoint_dir: str, events_dir: str | None = None,
                 attempts: list[Mapping[str, Any]] | str | None = None, attempts_task_id: str | None = None,
                 chart_path: str | None = None, gcp_conn_id: str = "google_cloud_default",
                 impersonation_chain: str | Sequence[str] | None = None, goodput_recording: bool | str = False,
                 goodput_run_name: str | None = None, goodput_logger_name: str | None = None,
                 goodput_reader_factory: Any = None, checkpointing: Any = None, slices: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpointing = checkpointing
        self.slices = slices
        self.goodput_recording = goodput_recording
        self.goodput_run_name = goodput_run_name
        self.goodput_logger_name = goodput_logger_name
        self.goodput_reader_factory = goodput_reader_factory
        self.checkpoint_dir = checkpoint_dir
        self.events_dir = events_dir
        self.attempts = attempts
        self.attempts_task_id = attempts_task_id
        self.chart_path = chart_path
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain

    def build_timeline(self) -> tuple[Timeline, str]:
        from mtc_provider.adapters.checkpoint_stores import list_newest, open_store
        from mtc_provider.core.view.goodput import Attempt, timeline_from_checkpoints, timeline_from_workload_events

        if self.events_dir:
            from mtc_provider.adapters.workload_events import read_events

            events = read_events(self.events_dir)
            if events:
                return timeline_from_workload_events(events), "workload events"
        from mtc_provider.sensors.checkpoint import replicator_backups

        backup_dir, nodes = replicator_backups(self.slices, self.checkpointing)  # SpecError before any listing
        attempts = parse_attempts(self.attempts)
        store = open_store(self.checkpoint_dir, self.gcp_conn_id, self.impersonation_chain)
        newest = list_newest(store, self.checkpoint_dir, backup_dir=backup_dir, nodes=nodes)
        checkpoints = [(info.step, info.commit_time) for info in newest.finalized if info.commit_time is not None]
        source, backup = "checkpoint commit times", newest.backup
        if backup is not None and attempts and backup > max((step for step, _ in checkpoints), default=-1):
            # Seen restorable by the end of the last attempt, the latest time the listing vouches for.
            checkpoints.append((backup, max(attempt.end for attempt in attempts)))
            source += f" and the replicator backup of step {backup} (complete on all {nodes} nodes)"
        if not attempts and checkpoints:  # nothing known about restarts: one attempt spanning the checkpoints
            attempts = [Attempt(checkpoints[0][1], checkpoints[-1][1], FINISHED)]
        return timeline_from_checkpoints(attempts, checkpoints), source

    def _workload_events(self) -> bool:
        """Whether `events_dir` holds the local workload's events."""
        if not self.events_dir:
            return False
        from mtc_provider.adapters.workload_events import read_events

        return bool(read_events(self.events_dir))

    def from_ledger(self, ledger: RunLedger | Mapping[str, Any]) -> tuple[Timeline, GoodputReport, dict[str, Any]]:
        """The run ledger's figures (core.view.run_goodput.goodput_from_ledger) over the span the run view measures
        once the run ended: the first attempt's start to the last one's end (the ledger's newest fact without
        attempt records), and its intervals as the chart's Timeline."""
        from mtc_provider.core.view.goodput import GoodputReport
        from mtc_provider.core.view.run_goodput import (as_ledger, chart_marks, goodput_from_ledger, ledger_end,
                                                        timeline_from_ledger)

        facts = as_ledger(ledger)  # SpecError naming the field, before anything is written
        spans = parse_attempts(self.attempts)
        begin = min((a.start for a in spans), default=None)
        end = max((a.end for a in spans), default=None) or ledger_end(facts) or time.time()
        figures = goodput_from_ledger(facts, end=end, begin=begin)
        report = GoodputReport(elapsed_s=figures["elapsed_s"], productive_s=figures["productive_s"],
                               goodput=figures["goodput"], badput_s=figures["badput_s"],
                               recovery_s=figures["recovery_s"], disruptions=figures["disruptions"],
                               last_productive_step=figures["last_productive_step"],
                               ideal_step_s=figures["step_seconds"])
        return timeline_from_ledger(facts, end=end), report, chart_marks(facts)

    def execute(self, context: Context) -> dict[str, Any]:
        from mtc_provider.adapters.attempt_journal import LEDGER_XCOM_KEY
        from mtc_provider.core.view.goodput import compute_goodput

        ledger, marks = None, {}
        if self.attempts_task_id:
            if self.attempts in (None, "", "None"):
                self.attempts = context["ti"].xcom_pull(task_ids=self.attempts_task_id, key="attempts") or []
            ledger = context["ti"].xcom_pull(task_ids=self.attempts_task_id, key=LEDGER_XCOM_KEY)
        if ledger:
            from mtc_provider.core.attempt.ledger import RunLedger

            facts = RunLedger.from_dict(ledger)  # SpecError naming the field, before anything is written
            ledger = facts if facts.starts and not self._workload_events() else None
        # the run's one record of its intervals (the run view's and `mtc status`'s figures), unless the local
        # workload's own events, one per step and process, tell more; a ledger without a start tells nothing yet
        if ledger:
            timeline, report, marks = self.from_ledger(ledger)
            source = LEDGER_SOURCE
        else:
            timeline, source = self.build_timeline()
            report = compute_goodput(timeline)
        run_file = f"{context['run_id']}.png".replace(":", "_").replace("+", "_")
        on_gcs = self.checkpoint_dir.startswith("gs://") and not self.chart_path
        path = self.chart_path or (
            os.path.join(self.events_dir, "goodput.png") if self.events_dir
            else os.path.join(tempfile.gettempdir(), f"mtc-goodput-{run_file}") if on_gcs
            else os.path.join(os.path.dirname(self.checkpoint_dir.rstrip("/")), "goodput", run_file))
        render_chart(timeline, report, path, **marks)
        url = path
        if on_gcs and not self.events_dir:
            url = self._upload(path, run_file)
        if "ti" in context:  # the "Goodput chart" extra link on every target: console page, or the run view plugin
            from mtc_provider.links.jobset import run_of

            local = not url.startswith("gs://")
            context["ti"].xcom_push(key=GoodputChartLink.key, value=chart_link_url(url, run_of(context) if local else None))
        self.log.info("goodput %.1f%% (this provider's, from %s): productive %.0fs of %.0fs; %d disruption(s); "
                      "badput %s; recovery %s; chart %s", 100 * report.goodput, source, report.productive_s,
                      report.elapsed_s, report.disruptions, report.badput_s, report.recovery_s, url)
        library = self.library_report()
        metrics.goodput(metrics.tags(getattr(context.get("ti"), "dag_id", None), self.task_id), report.goodput)
        advice = self.checkpoint_advice()
        result = {**report.to_payload(), "source": source, "chart_path": url, "advice": advice}
        if library is not None:
            result["library"] = library
        return result

    def _recording_on(self) -> bool:
        flag = self.goodput_recording
        if isinstance(flag, str) and flag.strip().lower() in ("true", "false", "1", "0", "yes", "no", "on", "off", ""):
            flag = flag.strip().lower() in ("true", "1", "yes", "on")
        if not isinstance(flag, bool):
            raise SpecError("goodput_recording", self.goodput_recording, "true or false")
        return flag

    def library_report(self) -> dict[str, Any] | None:
        """ml-goodput-measurement's figures from MaxText's records (when goodput_recording is on), else None."""
        if not self._recording_on():
            return None
        from mtc_provider.adapters import library_goodput as lib

        run_name = self.goodput_run_name or os.path.basename(os.path.dirname(self.checkpoint_dir.rstrip("/")))
        factory = self.goodput_reader_factory or (lambda job, logger: lib.connection_reader(
            job, logger, self.gcp_conn_id, self.impersonation_chain))
        try:
            figures = lib.library_goodput(run_name, self.goodput_logger_name, reader_factory=factory)
        except ImportError as exc:
            self.log.warning("goodput_recording is on but %s is not installed (%s): %s", lib.LIBRARY, exc,
                             lib.INSTALL_HINT)
            return None
        except Exception as exc:  # noqa: BLE001 - the library's figure is beside ours, never instead of it
            self.log.warning("could not read MaxText's goodput records of %s (logger %s) with %s: %s: %s", run_name,
                             self.goodput_logger_name or lib.logger_name_for(run_name), lib.LIBRARY,
                             type(exc).__name__, exc)
            return None
        badput = ", ".join(f"{k} {100 * v:.1f}%" for k, v in figures["badput"].items() if isinstance(v, float) and v)
        self.log.info("goodput %.1f%% (%s's, from MaxText's own records, logger %s; last productive step %s): "
                      "badput %s", 100 * figures["goodput"], lib.LIBRARY, figures["logger_name"],
                      figures["last_step"], badput or "none")
        return figures

    def checkpoint_advice(self) -> dict[str, Any] | None:
        """Checkpoint periods advised from this run_name's events (core.view.advisor), logged as one line."""
        if not self.events_dir:
            return None
        from mtc_provider.core.view.advisor import advice_after_run
        from mtc_provider.adapters.workload_events import read_events

        events = read_events(self.events_dir)
        if not events:
            return None
        advice = advice_after_run(events)
        self.log.info("checkpoint advice: %s", advice["line"])
        return advice

    def _upload(self, path: str, run_file: str) -> str:
        """Write the chart next to the checkpoints: gs://<bucket>/<run>/goodput/<run id>.png."""
        from airflow.providers.google.cloud.hooks.gcs import GCSHook

        from mtc_provider.adapters.checkpoint_stores import split_gcs_uri

        bucket, prefix = split_gcs_uri(self.checkpoint_dir)
        run_prefix = prefix.rsplit("/", 1)[0] if "/" in prefix else prefix
        name = f"{run_prefix}/goodput/{run_file}".lstrip("/")
        GCSHook(gcp_conn_id=self.gcp_conn_id, impersonation_chain=self.impersonation_chain).upload(
            bucket_name=bucket, object_name=name, filename=path, mime_type="image/png")
        return f"gs://{bucket}/{name}"
