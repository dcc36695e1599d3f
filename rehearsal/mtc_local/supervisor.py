"""The detached supervisor: owns the pods of every JobSet in one home, so they outlive the task that made them.

Started on demand by the client (`python -m mtc_local.supervisor <home> [--stay]`, in a new
session); one per home, enforced by an flock on <home>/supervisor.lock. It hosts the local cluster's Kubernetes API
server (local/cluster/apiserver.py, reached through <home>/kubeconfig) and is its JobSet controller and kubelet:
every JobSet and pod it runs is an object there. The API server binds MTC_RUNNER_BIND_HOST (default 127.0.0.1;
0.0.0.0 in docker-compose.yaml, where other containers share the home) and answers only the home's token. The
supervisor keeps every JobSet object in <home>/state/ too (so a restarted supervisor adopts what was running), and
exits by itself after MTC_RUNNER_IDLE_SECONDS with no active JobSet (never with --stay or the home's `stay` file, as
`mtc local up` leaves it).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Any, Callable

from mtc_provider.core.basics.errors import SpecError
from mtc_local.cluster import errors as api_errors
from mtc_local.cluster import kubeconfig, pki
from mtc_local.cluster.access import Access
from mtc_local.cluster.apiserver import ApiServer
from mtc_local.cluster.lifecycle import STAY_FILE
from mtc_local.cluster.pods import pod_events, pod_object
from mtc_local.cluster.resources import CHECKPOINT_CONFIGURATIONS, CONFIGMAPS, EVENTS, JOBSETS, NAMESPACES, PODS
from mtc_local.cluster.store import Store
from mtc_local.shared import auth
from mtc_local.runner.faults import parse_plan
from mtc_local.runner.jobset import FOREGROUND_FINALIZER as FOREGROUND
from mtc_local.runner.jobset import JobSetRun
from mtc_local.runner.manifest import FAULT_PLAN_ANNOTATION, LOG_DIR_ANNOTATION
from mtc_local.runner.pods import Pod
from mtc_local.runner.ramdisk import RamdiskRootError, check_private_root, ensure_private_root
from mtc_local.shared.state import Home, read_json, write_json

TICK_SECONDS = 0.1
IDLE_SECONDS = float(os.environ.get("MTC_RUNNER_IDLE_SECONDS", "60"))
DEFAULT_BIND_HOST = "127.0.0.1"


def bind_host() -> str:
    return os.environ.get("MTC_RUNNER_BIND_HOST") or DEFAULT_BIND_HOST


def advertised_host(bound: str) -> str:
    """The address clients connect to (written to supervisor.json): MTC_RUNNER_ADVERTISE_HOST, else the bound
    address, else (bound to every interface) this machine's host name, as other containers resolve it."""
    if os.environ.get("MTC_RUNNER_ADVERTISE_HOST"):
        return os.environ["MTC_RUNNER_ADVERTISE_HOST"]
    return socket.gethostname() if bound == "0.0.0.0" else bound


DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public")


def new_store(home: Home) -> Store:
    """The API server's objects: the run lock, CheckpointConfigurations and namespaces outlive a restart."""
    store = Store(home.root / "objects", persisted=(CONFIGMAPS, CHECKPOINT_CONFIGURATIONS, NAMESPACES))
    for resource in (CONFIGMAPS, CHECKPOINT_CONFIGURATIONS, NAMESPACES):
        store.load(resource)
    for namespace in DEFAULT_NAMESPACES:
        if not store.list(NAMESPACES, None, field_selector=f"metadata.name={namespace}")[0]:
            store.create(NAMESPACES, "", {"metadata": {"name": namespace}, "spec": {"finalizers": ["kubernetes"]},
                                          "status": {"phase": "Active"}})
    return store


class Supervisor:
    """The runner: owns the JobSet runs of one home; the API server's Controller (JobSets and pods)."""

    def __init__(self, home: Home, store: Store | None = None) -> None:
        self.home = home
        self.lock = threading.RLock()
        self.runs: dict[tuple[str, str], JobSetRun] = {}
        self.orphans: dict[tuple[str, str], JobSetRun] = {}  # JobSets deleted with Orphan: their pods run on
        self.closing = False  # set (under the lock) when it exits: no JobSet is created from then on
        self.store = store or Store()
        self.published_pods: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}  # JobSet -> pod name -> object
        self.pod_index: dict[tuple[str, str], Pod] = {}  # (namespace, pod name) -> the process, for its log

    # ---- the API server's view -------------------------------------------------------------------
    def _adopt(self, run: JobSetRun, visible: bool = True) -> JobSetRun:
        """Publish the run's JobSet (and from now on its every change) to the store."""
        if visible:
            run.publish = lambda obj: self.store.put(JOBSETS, obj)
        self.runs[(run.namespace, run.name)] = run
        return run

    def sync_pods(self, run: JobSetRun) -> None:
        """The run's current pods as Pod objects, and the kubelet's events about them (cluster.pods.pod_events):
        ADDED / MODIFIED when they change, DELETED when they go."""
        key = (run.namespace, run.name)
        published = self.published_pods.setdefault(key, {})
        desired = {}
        for pod in run.pods.values():
            if pod.gone:  # deleted through the API and terminated
                continue
            desired[pod.object_name] = pod_object(run.obj, pod)
            self.pod_index[(run.namespace, pod.object_name)] = pod
            for event in pod_events(desired[pod.object_name], pod):
                desired[f"event/{event['metadata']['name']}"] = event
        for name, obj in desired.items():
            if published.get(name) != obj:
                published[name] = json.loads(json.dumps(obj))
                self.store.put(EVENTS if name.startswith("event/") else PODS, obj)
        for name in [n for n in published if n not in desired]:
            if name.startswith("event/"):
                self.store.remove(EVENTS, run.namespace, name[len("event/"):])
            else:
                self.store.remove(PODS, run.namespace, name)
            del published[name]
            self.pod_index.pop((run.namespace, name), None)
        if not published:
            self.published_pods.pop(key, None)

    def create_jobset(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.closing:  # exiting for idleness: a JobSet made now would be left to the next supervisor
                raise api_errors.StatusError(503, "ServiceUnavailable", "the local cluster is shutting down (idle); "
                                             "try again: the next request starts it")
            return self._create_checked(namespace, obj)

    def delete_jobset(self, namespace: str, name: str, propagation: str) -> dict[str, Any] | None:
        with self.lock:
            if propagation == "Orphan":
                self._orphan(namespace, name)
                return None
            self._delete(namespace, name, foreground=propagation == "Foreground")
            try:
                return self.store.get(JOBSETS, namespace, name)
            except api_errors.StatusError:
                return None

    def update_jobset(self, namespace: str, name: str, change: Callable[[dict[str, Any]], dict[str, Any]],
                      dry_run: bool = False) -> dict[str, Any]:
        """A PATCH: `change` maps the stored object to the new one (the API server validated it); the run carries
        the new labels, annotations, spec and status on, so its next status write keeps them."""
        with self.lock:
            current = self.store.get(JOBSETS, namespace, name)
            new = change(current)
            if dry_run or new == current:
                return new
            if new.get("spec") != current.get("spec"):
                new["metadata"]["generation"] = int(current["metadata"].get("generation") or 1) + 1
            run = self.runs.get((namespace, name))
            if run is not None and run.publish is not None:
                previous = run.snapshot()
                for key in ("metadata", "spec", "status"):
                    run.obj[key] = new.get(key) or {}
                run.save(previous)
                return run.snapshot()
            self.store.put(JOBSETS, new)  # a finished JobSet: nothing runs, the object and its state file change
            write_json(self.home.jobset_file(namespace, name), new)
            return new

    def delete_pod(self, namespace: str, name: str, grace: float | None) -> dict[str, Any] | None:
        with self.lock:
            for run in [*self.runs.values(), *self.orphans.values()]:
                pod = next((p for p in run.pods.values() if p.object_name == name and not p.gone), None)
                if pod is not None:
                    previous = run.snapshot()
                    run.delete_pod(pod, grace)
                    run.save(previous)
                    self.sync_pods(run)
                    self._finish_orphans()
                    try:
                        return self.store.get(PODS, namespace, name)
                    except api_errors.StatusError:
                        return None
            # A pod of a finished JobSet: nothing runs any more, the object just goes.
            for key, published in list(self.published_pods.items()):
                if key[0] == namespace and name in published:
                    del published[name]
                    self.pod_index.pop((namespace, name), None)
                    self.store.remove(PODS, namespace, name)
                    if not published:
                        del self.published_pods[key]
            return None

    def pod(self, namespace: str, name: str) -> Pod | None:
        return self.pod_index.get((namespace, name))

    def recover(self) -> None:
        """Adopt JobSets a previous supervisor left unfinished (it died, or it was killed)."""
        for path in self.home.jobset_files():
            obj = read_json(path)
            if not obj or (obj.get("status") or {}).get("terminalState") and not obj["metadata"].get(
                "deletionTimestamp"
            ):
                continue
            created = (read_json(path.with_name(path.stem + ".pods.json")) or {}).get("created", time.time())
            try:
                run = JobSetRun(self.home, obj, created)
            except (SpecError, KeyError) as err:  # a damaged state file must not stop the other JobSets
                print(f"skipping {path}: {err}", flush=True)
                continue
            print(f"recovering {run.namespace}/{run.name}", flush=True)
            meta = run.obj["metadata"]
            self.store.observe_version(int(meta.get("resourceVersion") or 0))
            background = bool(meta.get("deletionTimestamp")) and FOREGROUND not in meta.get("finalizers", [])
            self._adopt(run, visible=not background)
            if not background:
                self.store.put(JOBSETS, run.obj)
            run.recover()
            self.sync_pods(run)
        for path in self.home.jobset_files():  # finished JobSets stay readable, as in a cluster
            obj = read_json(path)
            meta = (obj or {}).get("metadata") or {}
            if obj and (meta.get("namespace"), meta.get("name")) not in self.runs:
                self.store.observe_version(int(meta.get("resourceVersion") or 0))
                self.store.put(JOBSETS, obj)

    # ---- requests (from the API server's threads, under self.lock) --------------------------------
    def _create_checked(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if (namespace, name) in self.orphans:  # its Jobs (same names) still exist, as they would on a cluster
            raise api_errors.StatusError(
                409, "AlreadyExists", f'jobsets.jobset.x-k8s.io "{name}": the pods of an earlier JobSet of this name, '
                "deleted with propagationPolicy Orphan, still exist; delete them (kubectl delete pod) first",
                {"name": name, "group": JOBSETS.group, "kind": JOBSETS.plural})
        path = self.home.jobset_file(namespace, name)
        if path.exists():
            current = read_json(path) or {}
            deleting = bool((current.get("metadata") or {}).get("deletionTimestamp"))
            raise api_errors.already_exists(JOBSETS, name, being_deleted=deleting)
        obj = json.loads(json.dumps(body))
        obj.setdefault("apiVersion", "jobset.x-k8s.io/v1alpha2")
        obj.setdefault("kind", "JobSet")
        meta = obj["metadata"]
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            generation=1,
            resourceVersion="0",
        )
        meta.setdefault("annotations", {})[LOG_DIR_ANNOTATION] = str(self.home.log_dir(namespace, name))
        obj["status"] = {}
        try:
            run = JobSetRun(self.home, obj, time.time())
            parse_plan((meta.get("annotations") or {}).get(FAULT_PLAN_ANNOTATION), run.plan.num_slices,
                       run.plan.hosts_per_slice)
        except SpecError as err:  # what this cluster's controller cannot run, named by field
            raise api_errors.invalid(JOBSETS, name, [{"reason": "FieldValueInvalid", "field": err.field,
                                                      "message": str(err)}]) from err
        try:
            ensure_private_root(self.home.shm_root)
        except RamdiskRootError as err:  # before any side effect: the JobSet is not stored, nothing starts
            raise api_errors.StatusError(500, "InternalError", str(err)) from err
        # A new JobSet of an old name starts with no fault history and no ramdisk left from before.
        run.faults_file.unlink(missing_ok=True)
        run.fired = run.fired_in_run()
        self._adopt(run)
        run.start_all()
        run.save(None)
        self.sync_pods(run)
        return run.snapshot()

    def _delete(self, namespace: str, name: str, foreground: bool = True) -> None:
        """Foreground: the object stays (deletionTimestamp, finalizer) until its pods are gone. Background: the
        object goes now, the pods after (https://kubernetes.io/docs/concepts/architecture/garbage-collection/)."""
        run = self.runs.get((namespace, name))
        if run is None:
            obj = read_json(self.home.jobset_file(namespace, name))
            if obj is None:
                return
            run = self._adopt(JobSetRun(self.home, obj, time.time()))
            self.runs[(namespace, name)] = run
        previous = run.snapshot()
        if run.publish is None:  # already going in the background
            foreground = False
        run.request_delete(foreground)
        if not foreground:
            run.publish = None
            self.store.remove(JOBSETS, namespace, name)
        run.save(previous)
        self.sync_pods(run)
        self._finish_deletes()

    def _orphan(self, namespace: str, name: str) -> None:
        """Orphan: the JobSet object goes now; its pods stay, their processes run on (the Jobs own the pods,
        https://kubernetes.io/docs/concepts/architecture/garbage-collection/#orphaned-dependents)."""
        key = (namespace, name)
        run = self.runs.pop(key, None)
        if run is None:  # finished: nothing runs; its pods stay as objects until deleted
            obj = read_json(self.home.jobset_file(namespace, name))
            if obj is None:
                return
            run = JobSetRun(self.home, obj, time.time())
            run.pods = {}
            published = self.published_pods.pop(key, None)
            if published:  # its pods stay, apart from those of a later JobSet of the same name
                self.published_pods[(namespace, f"{name}/orphaned-{obj['metadata'].get('uid')}")] = published
        previous = run.snapshot()
        run.orphan()
        self.store.remove(JOBSETS, namespace, name)
        if not run.pods:
            run.remove()
            return
        run.save(previous)
        self.orphans[key] = run

    def _finish_orphans(self) -> None:
        for key, run in list(self.orphans.items()):
            if run.orphan_done:
                run.remove()
                self.sync_pods(run)
                del self.orphans[key]

    # ---- the reconcile loop ----------------------------------------------------------------------
    def _finish_deletes(self) -> None:
        for key, run in list(self.runs.items()):
            if run.finished_deleting():
                run.remove()
                run.pods = {}
                self.sync_pods(run)  # the pods go first, then the JobSet (its foreground finalizer)
                self.store.remove(JOBSETS, *key)
                del self.runs[key]

    def tick(self) -> None:
        now = time.time()
        for key, run in list(self.runs.items()):
            run.tick(now)
            self.sync_pods(run)
            if not run.active:
                del self.runs[key]  # terminal: the state file stays, nothing runs
        for run in self.orphans.values():
            run.tick(now)
            self.sync_pods(run)
        self._finish_deletes()
        self._finish_orphans()

    @property
    def busy(self) -> bool:
        """Something runs: an active JobSet, or an orphaned pod's process (or one whose start hold will end)."""
        return bool(self.runs) or any(p.alive or p.held_until is not None
                                      for r in self.orphans.values() for p in r.pods.values())

    def kill_everything(self) -> None:
        for run in [*self.runs.values(), *self.orphans.values()]:
            for pod in run.pods.values():
                pod.signal(signal.SIGKILL)


def make_private(home: Home) -> None:
    """The home, its state, logs and faults, and its ramdisks: only their owner may read them (0700 / 0600)."""
    os.umask(0o077)  # every file and folder the supervisor and its pods create from now on is private
    auth.make_private_dir(home.root)
    for folder in (home.state_dir, home.root / "logs", home.root / "faults"):
        if folder.is_dir():  # left by an older version: tighten it (new ones are private through the umask)
            os.chmod(folder, auth.PRIVATE_DIR)
    check_private_root(home.shm_root)  # on shared tmpfs: absent (made at the first JobSet) or this user's 0700 one


def main(home_arg: str, stay: bool = False) -> int:
    home = Home.of(home_arg)
    try:
        make_private(home)
    except RamdiskRootError as err:  # one line in supervisor.log, which ClusterUnavailable points to
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    lock = open(home.lock_file, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another supervisor owns this home
    token = auth.ensure_token(home.root)
    supervisor = Supervisor(home, new_store(home))
    host = bind_host()
    ca, cert, key = pki.ensure(home.root, (advertised_host(host),))
    api = ApiServer(supervisor.store, supervisor, token, host, kubeconfig.server_port(home.root),
                    pki.server_context(cert, key), Access(home.root), delete_audit=home.delete_audit_file)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with supervisor.lock:
        supervisor.recover()
    api.start()
    kubeconfig.write(home.root, f"https://{advertised_host(host)}:{api.port}", token, ca.read_bytes())
    write_json(home.supervisor_file, {"pid": os.getpid(), "host": advertised_host(host), "home": str(home.root),
                                      "api_port": api.port, "stay": stay})
    idle_since = time.time()
    try:
        while not stop.is_set():
            with supervisor.lock:
                supervisor.tick()
                if supervisor.busy or stay or (home.root / STAY_FILE).exists():
                    idle_since = time.time()
                elif time.time() - idle_since > IDLE_SECONDS:
                    supervisor.closing = True
                    break
            stop.wait(TICK_SECONDS)
    finally:
        with supervisor.lock:
            supervisor.closing = True
            if stop.is_set():
                supervisor.kill_everything()  # stopped by a signal: leave nothing orphaned
        api.stop()
        info = read_json(home.supervisor_file)
        if info and info.get("pid") == os.getpid():
            home.supervisor_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], stay="--stay" in sys.argv[2:]))
