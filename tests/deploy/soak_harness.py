"""The soak's moving parts around a running topology (scripts/airflow_topology.py): the fault injectors, the
sampler that measures supervision, and the figures and checks read from the records the run leaves.

- `Timeline`: every fault injected, every train state change, every JobSet change, every DELETE, with its time
  since training started; printed at the end.
- `Sampler`: twice a second, from the metadata database (train's state and its trigger's triggerer) and the
  local cluster's state files (read directly: the API may be down): who supervises the attempt. An attempt is
  supervised while a worker runs train or a triggerer that is neither stopped nor dead holds its trigger;
  anything else is a supervision gap.
- `Injectors`: one method per orchestrator fault of soak_schedule; each waits until train is deferred on a live
  JobSet, so every fault strikes a watched attempt. Airflow's own services fail through the topology's
  forwarders (the machine's PostgreSQL and Redis are shared: never stopped); replicas that exit meanwhile are
  restarted by the topology's `restart_always()`, as `restart: always` does.
- `effects`: what each fault did: supervision gaps, replicas restarted, tries of train that never reached the
  provider.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from mtc_provider.core.basics import labels as L
from mtc_provider.core.basics.vocabulary import DELETE_ATTEMPT_ENDED, DELETE_TEARDOWN
from mtc_local.shared.state import Home, read_json, read_jsonl
from scripts.airflow_topology import Topology, wait_until
from tests.deploy import soak_schedule as S

DAG_ID = "mtc_resilient_training"
NAMESPACE = "default"
TRIGGERERS = ("airflow-triggerer-1", "airflow-triggerer-2")
WORKER = "airflow-worker-1"
SUPERVISOR = "mtc-local-1"
APISERVER = "airflow-apiserver-1"


# ---- the timeline --------------------------------------------------------------------------------------
@dataclass
class Timeline:
    origin: float = field(default_factory=time.time)  # unix time of training's start (reset when it starts)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, detail: str = "", at: float | None = None) -> None:
        with self.lock:
            self.events.append((time.time() if at is None else at, what, detail))

    def rel(self, at: float) -> float:
        return round(at - self.origin, 1)

    def render(self) -> str:
        with self.lock:
            rows = sorted(self.events)
        return "\n".join(f"{self.rel(t):>8.1f}s  {what:<22} {detail}" for t, what, detail in rows)


# ---- supervision -----------------------------------------------------------------------------------------
@dataclass
class Sample:
    at: float
    state: str | None
    try_number: int
    holder: str | None  # host name of the triggerer holding train's trigger
    supervised: bool


@dataclass
class Gap:
    start: float
    end: float
    states: tuple[str, ...]
    holders: tuple[str, ...]

    @property
    def seconds(self) -> float:
        return round(self.end - self.start, 1)

    @property
    def cause(self) -> str:
        """`retry` (waiting out Airflow's retry delay), `resume` (the trigger fired; train queued for a worker),
        `triggerer` (its triggerer stopped or died, the trigger not yet moved)."""
        if "up_for_retry" in self.states:
            return "retry"
        if set(self.states) & {"scheduled", "queued", "None"}:
            return "resume"
        return "triggerer"


@dataclass
class JobSetRecord:
    name: str
    first_seen: float
    terminal: str | None = None
    terminal_at: float | None = None
    restarts: int = 0
    deleting_at: float | None = None
    gone_at: float | None = None
    reason: str = ""


class Sampler:
    """Samples train's supervision and the run's JobSets until stopped."""

    def __init__(self, topo: Topology, run_id: str, run_name: str, timeline: Timeline, interval: float = 0.5) -> None:
        self.topo, self.run_id, self.run_name, self.timeline, self.interval = topo, run_id, run_name, timeline, interval
        self.home = Home.of(topo.places.local_home)
        self.samples: list[Sample] = []
        self.jobsets: dict[str, JobSetRecord] = {}
        self.stopped: set[str] = set()  # triggerers SIGSTOPped by an injector right now
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def train(self) -> tuple[str | None, int, str | None]:
        rows = self.topo.sql(
            "SELECT ti.state, ti.try_number, j.hostname FROM task_instance ti LEFT JOIN trigger t ON t.id = ti.trigger_id "
            "LEFT JOIN job j ON j.id = t.triggerer_id WHERE ti.dag_id = %s AND ti.run_id = %s AND ti.task_id = 'train'",
            (DAG_ID, self.run_id))
        return rows[0] if rows else (None, 0, None)

    def run_ended(self) -> bool:
        rows = self.topo.sql("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (DAG_ID, self.run_id))
        return bool(rows) and rows[0][0] in ("success", "failed")

    def live(self, host: str | None) -> bool:
        return bool(host) and host not in self.stopped and host not in self.topo.killed \
            and host in self.topo.procs and self.topo.procs[host].poll() is None

    def _loop(self) -> None:
        last: tuple | None = None
        while not self._stop.is_set():
            now = time.time()
            try:
                state, try_number, holder = self.train()
                supervised = state == "running" or (state == "deferred" and self.live(holder))
                self.samples.append(Sample(now, state, try_number, holder, supervised))
                if (state, try_number, holder) != last:
                    self.timeline.add("train", f"try {try_number} {state}" + (f" on {holder}" if holder else ""), now)
                    last = (state, try_number, holder)
                self._jobsets(now)
            except Exception as exc:  # noqa: BLE001 - a sampling hiccup is recorded, never fatal
                self.errors.append(f"{self.timeline.rel(now)}s {type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)

    def _jobsets(self, now: float) -> None:
        folder = self.home.state_dir / NAMESPACE
        present = {p.stem: p for p in folder.glob(f"{self.run_name}-*.json") if not p.name.endswith(".pods.json")} \
            if folder.exists() else {}
        for name, path in present.items():
            obj = read_json(path) or {}
            rec = self.jobsets.get(name)
            if rec is None:
                rec = self.jobsets[name] = JobSetRecord(name, now)
                self.timeline.add("jobset", f"{name} created", now)
            status = obj.get("status") or {}
            if status.get("restarts", 0) > rec.restarts:
                rec.restarts = status["restarts"]
                self.timeline.add("jobset", f"{name} in-cluster restart {rec.restarts}", now)
            if status.get("terminalState") and rec.terminal is None:
                rec.terminal, rec.terminal_at = status["terminalState"], now
                condition = next((c for c in status.get("conditions") or [] if c.get("type") == rec.terminal), {})
                rec.reason = condition.get("reason", "")
                self.timeline.add("jobset", f"{name} {rec.terminal} ({rec.reason})", now)
            if (obj.get("metadata") or {}).get("deletionTimestamp") and rec.deleting_at is None:
                rec.deleting_at = now
                self.timeline.add("jobset", f"{name} deleting", now)
        for name, rec in self.jobsets.items():
            if name not in present and rec.gone_at is None:
                rec.gone_at = now
                self.timeline.add("jobset", f"{name} gone", now)

    def gaps(self) -> list[Gap]:
        out, current = [], None
        for sample in self.samples:
            if sample.state in ("success", "failed"):
                break
            if not sample.supervised and sample.try_number:
                if current is None:
                    current = Gap(sample.at, sample.at, (), ())
                current.end = sample.at
                current.states = tuple(dict.fromkeys((*current.states, str(sample.state))))
                if sample.holder:
                    current.holders = tuple(dict.fromkeys((*current.holders, sample.holder)))
            elif current is not None:
                current.end = sample.at
                out.append(current)
                current = None
        if current is not None:
            out.append(current)
        return [g for g in out if g.seconds > 0]


# ---- the injectors ---------------------------------------------------------------------------------------
def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal_tree(procs: list[psutil.Process], action: Callable[[psutil.Process], None]) -> None:
    for proc in procs:
        try:
            action(proc)
        except psutil.NoSuchProcess:
            pass


class Injectors:
    """The orchestrator faults, each against the running soak; each returns what it did (for the figures)."""

    def __init__(self, topo: Topology, sampler: Sampler, timeline: Timeline, api_faults: Any) -> None:
        self.topo, self.sampler, self.timeline, self.api_faults = topo, sampler, timeline, api_faults
        self.home = topo.places.local_home

    def run(self, fault: S.Fault) -> dict[str, Any] | None:
        """Inject one fault once train is watched; None when the run ended before."""
        holder = self.wait_watched()
        if holder is None:
            self.timeline.add("fault", f"{fault.kind} not injected: the run ended")
            return None
        self.timeline.add("fault", f"{fault.kind} begins (train's trigger on {holder})")
        began = time.time()
        done = getattr(self, fault.kind)(fault, holder)
        self.timeline.add("fault", f"{fault.kind} ends: {json.dumps(done)}")
        return {"kind": fault.kind, "planned_s": fault.at_s, "at_s": self.timeline.rel(began),
                "took_s": round(time.time() - began, 1), **done}

    def wait_watched(self, timeout: float = 600) -> str | None:
        """Until train is deferred, held by a live triggerer, on a JobSet that has not ended: that triggerer
        (None when train or its DAG run ended)."""
        ended = "ended"

        def watched() -> str | None:
            state, _, holder = self.sampler.train()
            if state in ("success", "failed") or self.sampler.run_ended():
                return ended
            live = [r for r in self.sampler.jobsets.values() if r.terminal is None and r.deleting_at is None]
            return holder if state == "deferred" and self.sampler.live(holder) and live else None

        found = wait_until("train deferred on a live JobSet", watched, timeout, interval=0.5,
                           alive=self.topo.check_alive)
        return None if found == ended else found

    def _moved(self, before: str, timeout: float = 180) -> str:
        other = next(t for t in TRIGGERERS if t != before)

        def moved() -> str | None:
            _, _, holder = self.sampler.train()
            return holder if holder == other else None

        return wait_until(f"train's trigger to move from {before} to {other}", moved, timeout, interval=0.2)

    def triggerer_stop(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        """SIGSTOP every process of the holding triggerer: its heartbeat lapses, the other takes the trigger; then
        SIGCONT, and the resumed one finds the trigger gone from its assignment (and cancels its copy)."""
        procs = _tree(self.topo.procs[holder].pid)
        self.sampler.stopped.add(holder)
        _signal_tree(procs, lambda p: p.suspend())
        stopped_at = time.time()
        try:
            moved_to = self._moved(holder)
            moved_s = round(time.time() - stopped_at, 1)
            time.sleep(5)  # the new holder runs the trigger before the old one wakes
        finally:
            _signal_tree(procs, lambda p: p.resume())
            self.sampler.stopped.discard(holder)
        return {"stopped": holder, "moved_to": moved_to, "moved_after_s": moved_s,
                "stopped_s": round(time.time() - stopped_at, 1)}

    def triggerer_kill(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        killed_at = time.time()
        self.topo.kill(holder)
        moved_to = self._moved(holder)
        moved_s = round(time.time() - killed_at, 1)
        self.topo.restart(holder)  # restart: always
        return {"killed": holder, "moved_to": moved_to, "moved_after_s": moved_s}

    def worker_kill(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        pids = self.topo.kill(WORKER)
        time.sleep(1)
        self.topo.restart(WORKER)
        return {"killed": WORKER, "pids": len(pids)}

    def listing_outage(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        from mtc_local.gcs import fail_listings

        fail_listings(self.home, 503, fault.seconds)
        time.sleep(fault.seconds)
        return {"status": 503, "seconds": fault.seconds}

    def api_outage(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        unavailable = round(fault.seconds * S.UNAVAILABLE_SHARE, 1)
        self.api_faults.unavailable(unavailable)
        time.sleep(unavailable)
        self.api_faults.refuse(fault.seconds - unavailable)
        time.sleep(fault.seconds - unavailable)
        self.api_faults.clear()
        return {"unavailable_s": unavailable, "refused_s": round(fault.seconds - unavailable, 1)}

    def api_hang(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        self.api_faults.hang(fault.seconds)
        time.sleep(fault.seconds)
        self.api_faults.clear()
        return {"hang_s": fault.seconds}

    def watch_cut(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        self.api_faults.cut_watches()
        return {"cut": True}

    def _unreachable(self, service: str, seconds: float) -> dict[str, Any]:
        self.topo.outage(service)
        began = time.time()
        try:
            time.sleep(seconds)
        finally:
            self.topo.outage(service, unreachable=False)
        return {"service": service, "unreachable_s": round(time.time() - began, 1)}

    def database_outage(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        """The metadata database refuses every connection of Airflow's and resets the open ones."""
        return self._unreachable("postgres", fault.seconds)

    def broker_outage(self, fault: S.Fault, holder: str) -> dict[str, Any]:
        return self._unreachable("redis", fault.seconds)

    def apiserver_kill(self, fault: S.Fault, holder: str, timeout: float = 1800) -> dict[str, Any]:
        """Wait for train's resume (its trigger fired: the try leaves `deferred`), SIGKILL one api-server replica
        right then, and start it again `fault.seconds` later: the resume's Execution API calls meet a dead
        replica and must reach the other."""
        _, try_before, _ = self.sampler.train()

        def resumed() -> tuple[str, int] | None:
            state, number, _ = self.sampler.train()
            return (state, number) if state != "deferred" else None

        state, number = wait_until("train's resume", resumed, timeout, interval=0.1, alive=self.topo.check_alive)
        killed_at = time.time()
        pids = self.topo.kill(APISERVER)
        time.sleep(max(0.0, killed_at + fault.seconds - time.time()))
        self.topo.restart(APISERVER)
        return {"killed": APISERVER, "pids": len(pids), "train_at_kill": f"try {number} {state}",
                "resumed_try": number, "try_before": try_before, "down_s": round(time.time() - killed_at, 1)}


# ---- what the run left: checks and figures ---------------------------------------------------------------
def deletes(topo: Topology) -> list[dict[str, Any]]:
    return read_jsonl(Home.of(topo.places.local_home).delete_audit_file)


def bad_deletes(records: list[dict[str, Any]], jobsets: dict[str, JobSetRecord],
                train_succeeded_at: float | None) -> list[dict[str, Any]]:
    """JobSet deletes other than an ended attempt's (the JobSet had ended before) or the teardown after success."""
    bad = []
    for record in records:
        if "/jobsets/" not in record["path"]:
            continue
        name = record["path"].rsplit("/", 1)[-1]
        rec = jobsets.get(name)
        if record["reason"] == DELETE_ATTEMPT_ENDED and rec and rec.terminal_at and rec.terminal_at <= record["time"] + 1:
            continue
        if record["reason"] == DELETE_TEARDOWN and train_succeeded_at and record["time"] >= train_succeeded_at:
            continue
        bad.append(record)
    return bad


def tries(topo: Topology, run_id: str) -> dict[str, int]:
    return dict(topo.sql("SELECT task_id, try_number FROM task_instance WHERE dag_id = %s AND run_id = %s",
                         (DAG_ID, run_id)))


def task_states(topo: Topology, run_id: str) -> dict[str, str]:
    return dict(topo.sql("SELECT task_id, state FROM task_instance WHERE dag_id = %s AND run_id = %s",
                         (DAG_ID, run_id)))


def train_end(topo: Topology, run_id: str) -> float | None:
    rows = topo.sql("SELECT extract(epoch from end_date) FROM task_instance WHERE dag_id = %s AND run_id = %s "
                    "AND task_id = 'train' AND state = 'success'", (DAG_ID, run_id))
    return float(rows[0][0]) if rows and rows[0][0] is not None else None


ERROR_LINE = re.compile(r"(JobSetAttemptFailed|AirflowFailException|AirflowException|Error|error|heartbeat|failed)")


def _last_error(path: Path) -> str:
    """The last error line of an Airflow 3 log (JSON lines: `event` is the message; plain lines matched)."""
    said = ""
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict):
            is_error = entry.get("level") in ("error", "critical")
            text = f"{entry.get('level', '')}: {entry.get('event', '')}"
            details = entry.get("error_detail")
            if isinstance(details, list) and details and isinstance(details[-1], dict):
                text += f" [{details[-1].get('exc_type', '')}: {str(details[-1].get('exc_value', ''))[:300]}]"
        else:
            is_error, text = bool(ERROR_LINE.search(line)), line
        if is_error:
            said = text[:500]
    return said


def _task_logs(topo: Topology, run_id: str, task_id: str) -> Path:
    return topo.places.airflow_home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={task_id}"


def try_reasons(topo: Topology, run_id: str, task_id: str, count: int) -> dict[int, str]:
    """Why each of the first `count` tries of a task ended: the last error line of its task log, else of its
    trigger's log (the triggerer writes `attempt=N.log.trigger.<job>.log` beside it: an attempt's end is decided
    there while the try is deferred), else the scheduler's word when neither said."""
    folder = _task_logs(topo, run_id, task_id)
    out = {}
    for number in range(1, count + 1):
        path = folder / f"attempt={number}.log"
        task = _last_error(path) if path.exists() else ""
        trigger = [t for t in (_last_error(p) for p in sorted(folder.glob(f"attempt={number}.log.trigger.*"))) if t]
        said = "; ".join([*([f"task log: {task}"] if task else []), *(f"triggerer log: {t}" for t in trigger[-1:])])
        out[number] = said or "(no error in the task or triggerer log: ended by the scheduler, e.g. a heartbeat " \
                               "timeout)"
    return out


def reached_provider(topo: Topology, run_id: str, number: int, task_id: str = "train") -> bool:
    """Whether a try ran any provider code: its task log names the provider (its loggers are `mtc_provider.*`).
    A try failed by the Execution API before the task started has `::group::Pre Execute` at most."""
    path = _task_logs(topo, run_id, task_id) / f"attempt={number}.log"
    return path.exists() and "mtc_provider" in path.read_text(errors="replace")


def try_history(topo: Topology, run_id: str, task_id: str = "train") -> list[dict[str, Any]]:
    """Every try of a task: number, state, start and end (unix time), from the history and the current row."""
    columns = "try_number, state, extract(epoch from start_date), extract(epoch from end_date)"
    rows = topo.sql(f"SELECT {columns} FROM task_instance_history WHERE dag_id = %s AND run_id = %s AND task_id = %s "
                    f"UNION ALL SELECT {columns} FROM task_instance WHERE dag_id = %s AND run_id = %s AND task_id = %s",
                    (DAG_ID, run_id, task_id) * 2)
    return [{"try": n, "state": state, "start": float(a) if a is not None else None,
             "end": float(b) if b is not None else None} for n, state, a, b in sorted(rows)]


def effects(injected: list[dict[str, Any]], gaps: list[Gap], restarts: list[dict[str, Any]],
            tries: list[dict[str, Any]], origin: float, reached: Callable[[int], bool],
            after_s: float = 120.0) -> list[dict[str, Any]]:
    """Each injected fault with what followed it within its span and `after_s` more (before the next fault
    began): the supervision gaps that started then, the replicas restarted, train's tries that ended then
    without reaching the provider."""
    out = []
    for i, fault in enumerate(injected):
        start = origin + fault["at_s"]
        end = start + fault["took_s"] + after_s
        if i + 1 < len(injected):
            end = min(end, origin + injected[i + 1]["at_s"])
        in_span = [g for g in gaps if start - 1 <= g.start < end]
        out.append({**fault, "effect": {
            "supervision_gap_s": round(sum(g.seconds for g in in_span), 1),
            "gaps": [{"at_s": round(g.start - origin, 1), "seconds": g.seconds, "cause": g.cause} for g in in_span],
            "restarted": [f"{r['replica']} (exit {r['exited']})" for r in restarts if start <= r["at"] < end],
            "tries_never_reaching_the_provider": [t["try"] for t in tries if t["end"] and start <= t["end"] < end
                                                  and t["state"] != "success" and not reached(t["try"])],
        }})
    return out


def lock_left(topo: Topology, run_name: str) -> bool:
    home = Home.of(topo.places.local_home)
    return (home.root / "objects" / "configmaps" / NAMESPACE / f"{L.lock_name(run_name)}.json").exists()


def training_seconds(events: list[dict[str, Any]]) -> float:
    starts = [e["ts"] for e in events if e["event"] == "start"]
    ends = [e["ts"] for e in events if e["event"] == "finish"]
    return round(max(ends) - min(starts), 1) if starts and ends else 0.0


def runner_faults(topo: Topology, run_name: str) -> list[dict[str, Any]]:
    return read_jsonl(Home.of(topo.places.local_home).faults_file(NAMESPACE, f"run-{run_name}"))


def write_results(path: str | Path | None, figures: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(figures, indent=1, default=str) + "\n")
