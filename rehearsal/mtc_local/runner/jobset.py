"""One JobSet run inside the supervisor: its pods, failure handling, faults and status (not thread-safe:
the supervisor calls it under its lock)."""

from __future__ import annotations

import contextlib
import copy
import shutil
import signal
import time
from typing import Any, Callable

from mtc_local.runner import policy
from mtc_provider.core.basics.labels import RUN_NAME
from mtc_local.runner.faults import Fault, parse_plan
from mtc_local.runner.manifest import FAULT_PLAN_ANNOTATION, JobSetPlan, parse, pod_spec
from mtc_local.runner.pods import Pod, free_port, kill_leftover, write_init_info
from mtc_local.runner.ramdisk import RamdiskRootError, check_private_root, ensure_private_root
from mtc_local.runner.replicator import Replicator, from_argv
from mtc_local.shared.state import Home, append_jsonl, read_json, read_jsonl, write_json

RUNNING, TERMINATING, DONE = "running", "terminating", "done"
FOREGROUND_FINALIZER = "foregroundDeletion"


class JobSetRun:
    def __init__(self, home: Home, obj: dict[str, Any], created: float) -> None:
        self.home = home
        self.obj = obj
        meta = obj["metadata"]
        self.namespace, self.name = meta["namespace"], meta["name"]
        self.plan: JobSetPlan = parse(self.namespace, obj)
        self.faults: list[Fault] = parse_plan(
            (meta.get("annotations") or {}).get(FAULT_PLAN_ANNOTATION), self.plan.num_slices, self.plan.hosts_per_slice
        )
        self.fired = {r["index"] for r in read_jsonl(self.faults_file)} | self.fired_in_run()
        self.created = created
        self.pods: dict[tuple[int, int], Pod] = {}
        self.job_pod_failures: dict[int, int] = {}
        self.failed_jobs: list[tuple[str, str, str, str]] = []  # (job, replicatedJob, reason, message)
        self.phase, self.after = RUNNING, ""
        self.orphaned = False  # its JobSet was deleted with propagationPolicy Orphan: its Jobs' pods run on
        self.step: int | None = None
        self._written_pods: list[dict[str, Any]] | None = None
        # Multi-tier mode only (runner.replicator); a command it cannot serve is refused here, at create.
        self.replicator: Replicator | None = from_argv(self.plan.replicated_jobs[0].command)
        # Set by the supervisor: writes the object to the API server's store, which stamps its resourceVersion.
        self.publish: Callable[[dict[str, Any]], str] | None = None
        status = obj.setdefault("status", {})
        status.setdefault("restarts", 0)
        status.setdefault("restartsCountTowardsMax", 0)
        status.setdefault("conditions", [])
        if status.get("terminalState"):
            self.phase = DONE

    # ---- files -----------------------------------------------------------------------------------
    @property
    def state_file(self):
        return self.home.jobset_file(self.namespace, self.name)

    @property
    def pods_file(self):
        return self.home.pods_file(self.namespace, self.name)

    @property
    def faults_file(self):
        return self.home.faults_file(self.namespace, self.name)

    @property
    def run_faults_file(self):
        """Faults fired for the whole training run: a resubmitted JobSet of the same run (label
        mtc.airflow.apache.org/run-name) does not fire them again. None for a JobSet without that label."""
        run_name = (self.obj["metadata"].get("labels") or {}).get(RUN_NAME)
        return self.home.faults_file(self.namespace, f"run-{run_name}") if run_name else None

    def fired_in_run(self) -> set[int]:
        return {r["index"] for r in read_jsonl(self.run_faults_file)} if self.run_faults_file else set()

    def save(self, previous: dict[str, Any] | None) -> None:
        """Write the object when it changed, bumping resourceVersion (watchers key on it).

        The pods first, then the JobSet: in Kubernetes a pod's terminated status comes from the kubelet before the
        Job controller counts it and JobSet's controller completes the JobSet, so a client that sees the JobSet
        Completed finds its pods terminated (the other order let a reader see a Completed JobSet whose pods had no
        terminated state yet)."""
        records = [pod.record() for pod in self.pods.values()]
        if records != self._written_pods:
            write_json(self.pods_file, {"created": self.created, "pods": records})
            self._written_pods = records
        self.obj["status"]["replicatedJobsStatus"] = self._replicated_jobs_status()
        if previous is None or previous != self.obj:
            meta = self.obj["metadata"]
            if self.publish is not None:
                self.publish(self.obj)
            else:
                meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
            write_json(self.state_file, self.obj)

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)

    # ---- lifecycle -------------------------------------------------------------------------------
    def start_all(self) -> None:
        """Start every host of every slice (a JobSet start or a Recreate restart)."""
        restart = self.obj["status"]["restarts"]
        coordinator = f"127.0.0.1:{free_port()}"
        self.pods, self.job_pod_failures, self.failed_jobs = {}, {}, []
        holds = {f.slice: f for f in self.faults if f.holds_at(restart) and f.index not in self.fired}
        ensure_private_root(self.home.shm_root)  # ours and 0700, or RamdiskRootError before any write
        for rj, job_index, slice_index in self.plan.slices():
            for host in range(rj.completions):
                ramdisk = self.home.ramdisk_dir(self.namespace, self.name, slice_index, host)
                spec = pod_spec(self.plan, rj, job_index, slice_index, host, coordinator, ramdisk, restart)
                write_init_info(ramdisk, spec.process_id, coordinator)
                log = self.home.log_dir(self.namespace, self.name) / str(restart) / f"s{slice_index}-h{host}.log"
                self.pods[(slice_index, host)] = Pod(spec, rj, job_index, restart, log)
        self._restore_local_tier()  # MTC restores the ramdisks before the workload starts
        for (slice_index, _host), pod in self.pods.items():
            if slice_index in holds:
                pod.hold(holds[slice_index].kind, holds[slice_index].seconds)
            else:
                pod.start()
        self.phase = RUNNING
        for fault in holds.values():
            self._fired(fault, time.time(), [])

    def recover(self) -> None:
        """After a supervisor died: kill what it left running, then start the current attempt again."""
        for record in (read_json(self.pods_file) or {}).get("pods", []):
            kill_leftover(record)
        if self.obj["metadata"].get("deletionTimestamp"):
            self.phase, self.after = TERMINATING, "delete"
        elif self.phase != DONE:
            self.start_all()

    def request_delete(self, foreground: bool = True) -> None:
        """Foreground: the object keeps the foregroundDeletion finalizer until its pods are gone
        (https://kubernetes.io/docs/concepts/architecture/garbage-collection/#foreground-deletion)."""
        meta = self.obj["metadata"]
        meta.setdefault("deletionTimestamp", _now())
        if foreground and FOREGROUND_FINALIZER not in meta.get("finalizers", []):
            meta["finalizers"] = [*meta.get("finalizers", []), FOREGROUND_FINALIZER]
        self._terminate_all("delete")

    def orphan(self) -> None:
        """The JobSet is deleted with propagationPolicy Orphan: it goes, its Jobs stay and run their pods on, under
        the Jobs' own policy (podFailurePolicy, backoffLimit) but no longer the JobSet's failurePolicy; the fault
        plan, the JobSet's annotation, goes with it
        (https://kubernetes.io/docs/concepts/architecture/garbage-collection/#orphaned-dependents)."""
        meta = self.obj["metadata"]
        meta.setdefault("deletionTimestamp", _now())  # a restarted supervisor ends what is left, never resumes it
        meta["finalizers"] = [f for f in meta.get("finalizers", []) if f != FOREGROUND_FINALIZER]
        self.orphaned, self.publish = True, None
        if self.phase == TERMINATING:  # pods already being deleted (a delete, a restart) go; nothing follows
            self.after = "orphaned"
            for pod in self.pods.values():
                pod.removed = pod.removed or pod.deletion_timestamp is not None

    @property
    def orphan_done(self) -> bool:
        """An orphan none of whose pods is an object any more (each was deleted and has terminated)."""
        return self.orphaned and all(p.gone for p in self.pods.values())

    def delete_pod(self, pod: Pod, grace: float | None) -> None:
        """A pod deleted through the API (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/
        #pod-termination): deletionTimestamp now, SIGTERM, SIGKILL after `grace` (default: the pod's
        terminationGracePeriodSeconds; 0: at once); once it has ended, its Job sees its exit (the tick) and the
        object goes. A Pending pod without a process (held by a start fault) fails at once, no exit code."""
        pod.deletion_timestamp = pod.deletion_timestamp or _now()
        pod.deletion_grace = pod.rj.grace_seconds if grace is None else grace
        pod.removed = True
        if pod.held is not None:
            hold = (pod.held, pod.held_until)
            pod.held = pod.held_until = None
            pod.finished = time.time()
            if self.phase == RUNNING:
                self._pod_exited(pod, hold)
            return
        if grace == 0:
            pod.signal(signal.SIGKILL)
        else:
            pod.terminate(pod.deletion_grace)

    def _terminate_all(self, after: str) -> None:
        self.phase, self.after = TERMINATING, after
        if after in ("delete", "restart"):  # the Job's pods are deleted (a Recreate restart deletes the Jobs)
            for pod in self.pods.values():
                pod.deletion_timestamp = pod.deletion_timestamp or _now()
        for pod in self.pods.values():
            pod.terminate(self.plan.grace_seconds())

    def finished_deleting(self) -> bool:
        return self.phase == TERMINATING and self.after == "delete" and not any(p.alive for p in self.pods.values())

    def remove(self) -> None:
        """The last step of delete: the ramdisks leave tmpfs, the state files go; logs and faults stay."""
        try:
            ours = check_private_root(self.home.shm_root)  # never remove through a link or in another's folder
        except RamdiskRootError:
            ours = False
        if ours:
            shutil.rmtree(self.home.shm_root / self.namespace / self.name, ignore_errors=True)
            for folder in (self.home.shm_root / self.namespace, self.home.shm_root):  # nothing left on tmpfs
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only when empty: other JobSets' ramdisks stay (the next start checks again)
        for path in (self.state_file, self.pods_file):
            path.unlink(missing_ok=True)

    @property
    def active(self) -> bool:
        return self.phase != DONE

    # ---- the reconcile step ----------------------------------------------------------------------
    def tick(self, now: float) -> None:
        previous = self.snapshot()
        exited = [pod for pod in self.pods.values() if pod.poll()]
        for pod in self.pods.values():
            pod.enforce_deadline(now)
            pod_step = pod.read_steps()
            if pod_step is not None and (self.step is None or pod_step > self.step):
                self.step = pod_step
        if self.phase == RUNNING:
            if self.replicator is not None and self.replicator.backup_due(self._ramdisks(), now):
                self.replicator.backup(self._ramdisks(), now)
            for pod in self.pods.values():
                pod.release_due(now)
            if not self.orphaned:
                self._fire_faults(now)
            for pod in exited:
                self._pod_exited(pod)
            if not self.orphaned:
                self._evaluate()
        elif self.phase == TERMINATING and not any(p.alive for p in self.pods.values()):
            # JobSet's Recreate recreates each Job as soon as its previous iteration and its pods are deleted
            # (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go, JobSetRestartStrategy); the runner starts
            # every slice once all are gone (BlockingRecreate's rule): never two pods of one slice at once either way.
            if self.after == "restart":
                self.start_all()
            elif self.after == "terminal":
                self.phase = DONE
        self.save(previous)

    def _pod_exited(self, pod: Pod, hold: tuple[str, float | None] | None = None) -> None:
        """The Job's view of a pod that ended: success, a replacement (that keeps a start fault's `hold`: the image
        still cannot be pulled, the node still lacks capacity), or a failed Job for the JobSet's failurePolicy."""
        if pod.exit_code == 0 or pod._handled:
            return
        pod._handled = True
        slice_index = pod.spec.slice_index
        failures = self.job_pod_failures.get(slice_index, 0)
        outcome, reason, message = policy.job_failure(
            pod.rj, pod.exit_code, failures, pod.conditions, f"{self.namespace}/{pod.object_name}")
        if outcome == "fail":
            job_name = f"{self.name}-{pod.rj.name}-{pod.job_index}"
            if all(job != job_name for job, *_ in self.failed_jobs):
                self.failed_jobs.append((job_name, pod.rj.name, reason, message))
            return
        if reason == "Count":
            self.job_pod_failures[slice_index] = failures + 1
        replacement = type(pod)(pod.spec, pod.rj, pod.job_index, pod.restart, pod.log_path)
        self.pods[(slice_index, pod.spec.host)] = replacement
        if hold is not None:
            replacement.held, replacement.held_until = hold
        else:
            replacement.start()

    def _evaluate(self) -> None:
        status = self.obj["status"]
        if self.failed_jobs:
            decision = policy.jobset_failure(self.plan, self.failed_jobs, status["restartsCountTowardsMax"])
            print(f"{self.namespace}/{self.name}: jobs failed {self.failed_jobs}: {decision}", flush=True)
            if decision.action == "fail":
                self._set_terminal(policy.FAILED, decision.reason, decision.message)
                self._terminate_all("terminal")
            else:
                status["restarts"] += 1
                if decision.counts_toward_max:
                    status["restartsCountTowardsMax"] += 1
                self._terminate_all("restart")
        elif self.pods and all(p.exit_code == 0 for p in self.pods.values()):
            if self.replicator is not None:
                # The ramdisk outlives the pods on the node and the replicator backs its last step up; here that
                # backup is taken before Completed is published, so a reader of Completed finds it.
                self.replicator.backup(self._ramdisks())
            self._set_terminal(policy.COMPLETED, *policy.ALL_JOBS_COMPLETED)
            self.phase = DONE

    def _set_terminal(self, kind: str, reason: str, message: str) -> None:
        status = self.obj["status"]
        status["conditions"] = [c for c in status["conditions"] if c.get("type") != kind]
        status["conditions"].append(policy.condition(kind, reason, message))
        status["terminalState"] = kind

    # ---- the MTC replicator (multi-tier mode) -----------------------------------------------------
    def _ramdisks(self) -> dict[int, Any]:
        return {pod.spec.process_id: pod.spec.ramdisk for pod in self.pods.values()}

    def _restore_local_tier(self) -> None:
        """A new start of the pods: in multi-tier mode every ramdisk gets the step MTC restores (runner.replicator)."""
        if self.replicator is not None:
            self.replicator.restore(self._ramdisks())

    # ---- faults ----------------------------------------------------------------------------------
    def _fire_faults(self, now: float) -> None:
        for fault in self.faults:
            if fault.at_start or fault.index in self.fired or not fault.due(self.step, now - self.created):
                continue
            targets = [
                p for p in self.pods.values()
                if p.spec.slice_index == fault.slice and (fault.host is None or p.spec.host == fault.host)
            ]
            self._apply(fault, targets)
            self._fired(fault, now, targets)

    def _fired(self, fault: Fault, now: float, targets: list[Pod]) -> None:
        """Record a fault as fired: once per JobSet, and once per run across resubmissions."""
        self.fired.add(fault.index)
        print(f"{self.namespace}/{self.name}: fault {fault} at step {self.step}", flush=True)
        record = {
            **fault.to_dict(),
            "ts": now,
            "time": _now(),
            "step": self.step,
            "restart": self.obj["status"]["restarts"],
            "jobset": self.name,
            "pids": [p.pid for p in targets if p.alive],
        }
        append_jsonl(self.faults_file, record)
        if self.run_faults_file:
            append_jsonl(self.run_faults_file, record)

    def _apply(self, fault: Fault, targets: list[Pod]) -> None:
        if fault.kind in ("sigkill_host", "kill_slice"):
            for pod in targets:
                pod.signal(signal.SIGKILL)
        elif fault.kind == "sigterm_slice":
            # A preemption or maintenance event: Kubernetes marks the pod it disrupts with the DisruptionTarget
            # condition before terminating it (kubernetes.io/docs/concepts/workloads/pods/disruptions/
            # #pod-disruption-conditions; reason TerminationByKubelet for a graceful node shutdown, as GKE's
            # maintenance and Spot preemption are). A pod that exits 0 has Succeeded and no failure policy applies;
            # one that fails matches the podFailurePolicy's onPodConditions rule.
            for pod in targets:
                pod.conditions = (*pod.conditions, policy.DISRUPTION_TARGET)
                pod.terminate(pod.rj.grace_seconds)
        elif fault.kind == "hang":
            for pod in targets:
                pod.signal(signal.SIGSTOP)
        elif fault.kind == "wipe_ramdisk":
            # Freeze first so the process cannot write into the ramdisk between the wipe and the kill.
            for pod in targets:
                pod.signal(signal.SIGSTOP)
                shutil.rmtree(pod.spec.ramdisk, ignore_errors=True)
                pod.signal(signal.SIGKILL)
        elif fault.kind == "listing_outage":
            from mtc_local.gcs import fail_listings

            fail_listings(self.home.root, fault.status, fault.seconds, fault.prefix or "")

    # ---- status ----------------------------------------------------------------------------------
    def _replicated_jobs_status(self) -> list[dict[str, Any]]:
        failed_names = {job for job, *_ in self.failed_jobs}
        out = []
        for rj in self.plan.replicated_jobs:
            counts = dict(ready=0, succeeded=0, failed=0, active=0, suspended=0)
            for job_index in range(rj.replicas):
                pods = [p for p in self.pods.values() if p.rj.name == rj.name and p.job_index == job_index]
                if not pods:
                    continue
                if f"{self.name}-{rj.name}-{job_index}" in failed_names:
                    counts["failed"] += 1
                elif all(p.exit_code == 0 for p in pods):
                    counts["succeeded"] += 1
                else:
                    if any(p.alive for p in pods):
                        counts["active"] += 1
                    if sum(1 for p in pods if p.alive or p.exit_code == 0) >= rj.completions:
                        counts["ready"] += 1
            out.append({"name": rj.name, **counts})
        return out


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
