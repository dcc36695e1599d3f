"""`MtcJobSetHook`: the provider's JobSet client, for the launch operator, `@task` code and scripts; and
`MtcJobSetAsyncHook`, its twin for the triggers (as cncf.kubernetes' KubernetesJobOperator runs over
KubernetesHook and its JobTrigger over the async hook). The launch operator submits, finds, deletes and takes its
run lock here, so a JobSet submitted by `@task` code is exactly what `MtcJobSetOperator` would submit.

    @task
    def launch():
        hook = MtcJobSetHook(target={"kind": "gke", "project_id": "p", "location": "us-central1",
                                     "cluster_name": "tpu"})
        created = hook.submit(slices, checkpointing, workload, customization={"queue_name": "q"})
        return [a.to_dict() for a in hook.find_by_run(checkpointing["run_name"])]
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from functools import cached_property
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Mapping, Sequence

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider import targets
from mtc_provider.adapters import retry
from mtc_provider.adapters.protocols import AlreadyExists, AsyncJobSetApi, CheckpointStore, JobSetApi, NotFound
from mtc_provider.core.basics import labels as L
from mtc_provider.core.attempt.status import JobSetState, evaluate_jobset
from mtc_provider.core.attempt.outage import OutageClock
from mtc_provider.core.basics.vocabulary import DELETE_ATTEMPT_ENDED, DELETE_UNSPECIFIED

ANSWER_CHECK_S = 0.5  # how often an ongoing outage checks whether the api answered again
RESUMED_FACTOR, RESUMED_MIN_S = 5.0, 60.0  # a gap between looks above both is said in the caller's log

if TYPE_CHECKING:  # the run description is imported where it is used: the triggerer loads this module on its loop
    from mtc_provider.core.attempt.attempts import Attempt
    from mtc_provider.core.definition.render.customization import CustomizationSpec
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
    from mtc_provider.core.definition.shape.tpu import SliceSpec


class StillTerminating(Exception):
    """A deleted JobSet of this task was still terminating when the wait for its deletion ran out."""


def _as(kind: type, value: Any) -> Any:
    # the run description's one dict-to-spec function
    from mtc_provider.core.definition.description.spec import spec_from_dict

    return spec_from_dict(kind, kind.__name__, value)


class MtcJobSetHook(BaseHook):
    """Submit, find, read and delete the provider's training JobSets, and read a run's newest checkpoint step.

    A 403 from the cluster raises `mtc_provider.adapters.kubernetes.Forbidden` (an AirflowFailException: a @task
    fails at once instead of spending its retries), naming the verb, the resource, the namespace and the identity.

    :param target: a target object (GkeTarget, LocalTarget, KubernetesTarget, or an installed kind's) or its dict
        (its `kind`: any of `mtc_provider.targets.kinds()`); None: local.
    :param kubernetes_conn_id: use this cncf.kubernetes connection instead of GKE credentials.
    :param kubeconfig: a kubeconfig file to use instead (what `mtc status --kubeconfig` passes).
    :param context: the kubeconfig context; default: the file's current context.
    :param checkpoint_store_factory: (checkpoint_dir, gcp_conn_id) -> CheckpointStore; default open_store.
    :param connection: serializable connection details (`targets.connection_for`), as the launch operator resolved
        them once for its try; instead of target/kubernetes_conn_id/kubeconfig.
    :param api_outage_timeout: seconds every request waits out an unreachable API (then ApiUnreachable); 0: bounded
        retries only.
    :param request_timeout: client-side seconds per request (default adapters.kubernetes.REQUEST_TIMEOUT).
    """

    hook_name = "MTC JobSet"

    def __init__(self, target: Any = None, kubernetes_conn_id: str | None = None, kubeconfig: str | None = None,
                 context: str | None = None,
                 checkpoint_store_factory: Callable[[str, str], CheckpointStore] | None = None,
                 connection: Mapping[str, Any] | None = None, api_outage_timeout: float = 0.0,
                 request_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connection = dict(connection) if connection is not None else None
        self.api_outage_timeout = float(api_outage_timeout)
        self.request_timeout = request_timeout
        from mtc_provider.target import target_from_dict

        # a resolved connection needs no target (and a deployment without the local target has no default one)
        self.target = target_from_dict(target) if connection is None or target is not None else None
        self.kubernetes_conn_id = kubernetes_conn_id
        self.kubeconfig = kubeconfig
        self.context = context
        self.checkpoint_store_factory = checkpoint_store_factory

    @property
    def namespace(self) -> str:
        return self.target.namespace

    @cached_property
    def api(self) -> JobSetApi:
        """The JobSetApi for the target (resolved once: GKE endpoint and CA, or the kubeconfig)."""
        if self.connection is not None:
            return targets.jobset_api(self.connection, outage_timeout=self.api_outage_timeout,
                                      request_timeout=self.request_timeout)
        if self.kubeconfig:
            from kubernetes import config

            from mtc_provider.adapters.kubernetes import KubernetesJobSetApi

            # Each client read from the file (the api opens one per client_reuse_seconds, and after a failed
            # request): exec plugins (gke-gcloud-auth-plugin) mint a fresh token, as the GKE hooks do.
            # A 403 names the kubeconfig and context beside the identity the API server names.
            return KubernetesJobSetApi(lambda: config.new_client_from_config(config_file=self.kubeconfig,
                                                                             context=self.context),
                                       where=f"kubeconfig {self.kubeconfig}" + (f" context {self.context}"
                                                                                 if self.context else ""))
        return targets.jobset_api(targets.connection_for(self.target, self.kubernetes_conn_id))

    def get_conn(self) -> JobSetApi:
        return self.api

    def waiting_out(self, api_outage_timeout: float) -> MtcJobSetHook:
        """This hook, its requests waiting an unreachable API out `api_outage_timeout` s instead, over the same
        client (adapters.kubernetes `waiting_out`; an api without outage waits is shared as it is)."""
        twin = copy.copy(self)
        twin.api_outage_timeout = float(api_outage_timeout)
        bounded = getattr(self.api, "waiting_out", None)
        twin.__dict__["api"] = bounded(twin.api_outage_timeout) if bounded else self.api
        return twin

    # --- submit -------------------------------------------------------------------------------------
    def render(self, slices: SliceSpec | Mapping[str, Any], checkpointing: CheckpointingSpec | Mapping[str, Any],
               workload: WorkloadSpec | Mapping[str, Any], labels: Mapping[str, str] | None = None,
               customization: CustomizationSpec | Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JobSet manifest, validated (a SpecError names the bad field) and customized."""
        from mtc_provider.core.definition.render.customization import CustomizationSpec
        from mtc_provider.core.definition.render.jobset_manifest import build_jobset
        from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
        from mtc_provider.core.definition.shape.tpu import SliceSpec

        return build_jobset(_as(SliceSpec, slices), _as(CheckpointingSpec, checkpointing),
                            _as(WorkloadSpec, workload), labels, CustomizationSpec.from_value(customization))

    def submit(self, slices: SliceSpec | Mapping[str, Any], checkpointing: CheckpointingSpec | Mapping[str, Any],
               workload: WorkloadSpec | Mapping[str, Any], labels: Mapping[str, str] | None = None,
               customization: CustomizationSpec | Mapping[str, Any] | None = None,
               attempt: int | None = None) -> dict[str, Any]:
        """Create the JobSet (in `workload.namespace`) and return it as the API answered.

        :param attempt: the try number written to the attempt label (what `find_by_run` orders by).
        """
        from mtc_provider.core.definition.render.jobset_manifest import pod_template
        from mtc_provider.core.basics.names import label_value

        body = self.render(slices, checkpointing, workload, labels, customization)
        if attempt is not None:
            for meta in (body["metadata"], pod_template(body)["metadata"]):
                meta["labels"][L.TRY_NUMBER] = label_value(str(attempt))
                meta["labels"][L.ATTEMPT] = label_value(str(attempt))
        namespace = body["metadata"]["namespace"]
        self.log.info("submitting JobSet %s/%s", namespace, body["metadata"]["name"])
        return self.api.create(namespace, body)

    # --- read ---------------------------------------------------------------------------------------
    def find_by_run(self, run_name: str, namespace: str | None = None) -> list[Attempt]:
        """Every JobSet the provider launched for this run name (each attempt), oldest first."""
        from mtc_provider.core.attempt.attempts import attempts, run_selector

        return attempts(self.api.list(namespace or self.namespace, run_selector(run_name)))

    def status(self, name: str, namespace: str | None = None) -> JobSetState:
        """The JobSet's phase, restarts and failure reason (the core's one evaluator)."""
        return evaluate_jobset(self.api.get(namespace or self.namespace, name))

    def newest_step(self, checkpoint_dir: str) -> int | None:
        """The newest finalized checkpoint step in `<base>/<run_name>/checkpoints`, or None."""
        from mtc_provider.adapters.checkpoint_stores import list_newest
        from mtc_provider.targets import backend_for

        backend = backend_for(self.target)
        if self.checkpoint_store_factory is not None:
            store = self.checkpoint_store_factory(checkpoint_dir, backend.google()[0])
        else:
            store = backend.checkpoint_store(checkpoint_dir)
        found = list_newest(store, checkpoint_dir).restorable()
        return found.step if found else None

    def run_status(self, run_name: str, namespace: str | None = None) -> dict[str, Any]:
        """A run at a glance: its attempts (state, restarts, reason) and the newest finalized step."""
        found = self.find_by_run(run_name, namespace)
        checkpoint_dir = next((a.checkpoint_dir for a in reversed(found) if a.checkpoint_dir), "")
        return {"run_name": run_name, "namespace": namespace or self.namespace,
                "attempts": [a.to_dict() for a in found], "checkpoint_dir": checkpoint_dir,
                "newest_step": self.newest_step(checkpoint_dir) if checkpoint_dir else None}

    def failed_pod_logs(self, name: str, namespace: str | None = None, lines: int = 50) -> list[str]:
        """The tails of the JobSet's failed pods' logs, leader first, as task-log lines (empty when none failed)."""
        from mtc_provider.adapters.pod_logs import failed_pod_tails, pod_logs_for

        logs = pod_logs_for(self.api)
        return failed_pod_tails(logs, namespace or self.namespace, name, lines) if logs else []

    def pod_logs(self) -> Any:
        """The cluster's pod log reader (adapters.pod_logs.PodLogs); NotImplementedError when its api has no pods."""
        from mtc_provider.adapters.pod_logs import pod_logs_for

        logs = pod_logs_for(self.api)
        if logs is None:
            raise NotImplementedError(f"{type(self.api).__name__} has no pod logs")
        return logs

    def leader_log_follower(self, name: str, namespace: str | None = None, max_lines: int = 50,
                            clock: Callable[[], float] | None = None) -> Any:
        """A LeaderLogFollower: each `poll()` returns the leader pod's new log lines (at most `max_lines`); `clock`:
        the wall clock its `sinceSeconds` is counted on (default time.time)."""
        from mtc_provider.adapters.pod_logs import LeaderLogFollower

        return LeaderLogFollower(self.pod_logs(), namespace or self.namespace, name, max_lines, clock)

    def delete(self, name: str, namespace: str | None = None, reason: str = DELETE_UNSPECIFIED) -> None:
        """Delete the JobSet and its pods; its checkpoints stay. `reason`: core.basics.vocabulary.DELETE_REASONS."""
        self.api.delete(namespace or self.namespace, name, reason=reason)

    def delete_ended(self, log: Any, jobsets: Mapping[str, Mapping[str, Any]], to_delete: Sequence[str], keep: int,
                     asked: str, run_name: str, namespace: str, when: str = "before the next attempt") -> None:
        """Ended attempts deleted (their slices freed; checkpoints stay in the bucket), but the newest `keep` failed
        ones, kept for debugging; each kept one is logged with how to read and delete it. The worker's launch and the
        trigger that submits the next attempt (triggers.next_in_try) both delete through here."""
        from mtc_provider.core.attempt.launch import attempt_of, kept_failed

        kept = kept_failed([jobsets[name] for name in to_delete], keep)
        for name in to_delete:
            if name in kept:
                number = attempt_of(jobsets[name])
                log.warning("keeping failed JobSet %s/%s for debugging (keep_failed_attempts=%s, asked by %s): its "
                            "pods' logs stay readable (mtc logs %s --attempt %s); the teardown deletes it, or: mtc "
                            "delete %s --attempt %s", namespace, name, keep, asked, run_name, number, run_name, number)
                continue
            log.info("deleting ended JobSet %s/%s (%s) %s (checkpoints are kept): asked by %s",
                     namespace, name, evaluate_jobset(jobsets[name]).phase, when, asked)
            self.delete(name, namespace, reason=DELETE_ATTEMPT_ENDED)

    # --- the launch operator's attempts ------------------------------------------------------------------
    def run_lock(self, namespace: str, run_name: str, run_labels: Mapping[str, str],
                 owner: Mapping[str, Any] | None = None) -> Any:
        """The run's lock (adapters.run_lock: a ConfigMap on GKE): one writer per run name, and its records."""
        from mtc_provider.adapters.run_lock import RunLock, lock_api

        connection = self.connection if self.connection is not None else \
            targets.connection_for(self.target, self.kubernetes_conn_id)
        return RunLock(lock_api(connection, self.api), namespace, run_name, run_labels, owner)

    def submit_attempt(self, namespace: str, name: str, body: Mapping[str, Any],
                       run_labels: Mapping[str, str]) -> tuple[dict[str, Any], bool]:
        """Create an attempt's JobSet: (the JobSet, True), or (the one already there under its name, False) when it
        is this task's (a worker that died after the create); a name taken by another run fails for good. Other
        API errors are the caller's to decide (core.attempt.resubmission.decide_rejected)."""
        try:
            return self.api.create(namespace, body), True
        except AlreadyExists:
            existing = self.api.get(namespace, name)
            if not L.belongs_to(existing["metadata"].get("labels"), run_labels):
                raise AirflowFailException(f"JobSet name {name} is taken by a JobSet of another run") from None
            self.log.info("JobSet %s already exists for this try: reattaching", name)
            return existing, False

    def this_tasks_jobsets(self, namespace: str, run_name: str, run_labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """This task's JobSets (every attempt), from one listing of the run name's JobSets.

        Two live JobSets of one run name would write the same checkpoints, so a live one of another DAG run or
        task (a new DAG run, or a re-run of `airflow dags test`) fails the try before anything is created.
        """
        selector = L.selector({L.RUN_NAME: run_labels[L.RUN_NAME], L.MANAGED_BY: L.MANAGED_BY_VALUE})
        mine = []
        for other in self.api.list(namespace, selector):
            labels = other["metadata"].get("labels") or {}
            if L.belongs_to(labels, run_labels):
                mine.append(other)
            elif evaluate_jobset(other).live:
                raise AirflowFailException(
                    f"run_name {run_name!r} already has a live JobSet {namespace}/{other['metadata']['name']} "
                    f"(DAG {labels.get(L.DAG_ID)}, run {labels.get(L.RUN_ID)}): two JobSets must not write the same "
                    "checkpoints; wait for it, delete it, or use another run_name"
                )
        return mine

    def wait_for_deletion(self, namespace: str, names: Sequence[str], timeout: float, poll_interval: float) -> None:
        """Foreground deletion keeps a JobSet (and its pods, which may still write) for a while: wait, bounded;
        StillTerminating names the JobSet when `timeout` seconds ran out."""
        deadline = time.monotonic() + float(timeout)
        pause = min(max(float(poll_interval), 0.0), 10.0)
        for name in names:
            logged = -1.0
            while True:
                try:
                    self.api.get(namespace, name)
                except NotFound:
                    self.log.info("JobSet %s/%s is gone", namespace, name)
                    break
                now = time.monotonic()
                if now >= deadline:
                    raise StillTerminating(
                        f"JobSet {namespace}/{name} is still terminating after {timeout:.0f}s "
                        "(foreground deletion waits for its pods); check its pods and finalizers: kubectl get jobset "
                        f"-n {namespace} {name} -o yaml")
                if logged < 0 or now - logged >= 60:
                    self.log.info("waiting for JobSet %s/%s to finish terminating (deletionTimestamp set, its pods "
                                  "are stopping) before the next attempt; at most %.0fs", namespace, name,
                                  deadline - now)
                    logged = now
                time.sleep(pause)


class MtcJobSetAsyncHook(BaseHook):
    """The triggers' JobSet client: the async api, rebuilt inside the triggerer from the serializable connection
    (every client mints a fresh token), the waiting (`watch`), and the sync hook for the few blocking calls a trigger
    runs off its loop.

    :param connection: serializable connection details (`targets.connection_for`).
    :param poll_interval: seconds between polls when the api cannot watch.
    :param request_timeout: client-side seconds per request (default adapters.kubernetes.REQUEST_TIMEOUT).
    """

    hook_name = "MTC JobSet (async)"

    def __init__(self, connection: Mapping[str, Any], poll_interval: float = 30.0,
                 request_timeout: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connection = dict(connection)
        self.poll_interval = poll_interval
        self.request_timeout = request_timeout

    @cached_property
    def api(self) -> AsyncJobSetApi:
        return targets.async_jobset_api(self.connection, poll_interval=self.poll_interval,
                                        request_timeout=self.request_timeout)

    def sync_hook(self, api_outage_timeout: float = 0.0) -> MtcJobSetHook:
        """The sync twin over the same connection (run lock, pod logs): call it off the event loop."""
        return MtcJobSetHook(connection=self.connection, api_outage_timeout=api_outage_timeout,
                             request_timeout=self.request_timeout)

    async def get_status(self, name: str, namespace: str) -> JobSetState:
        """The JobSet's phase, restarts and failure reason (the core's one evaluator)."""
        return evaluate_jobset(await self.api.get(namespace, name))

    async def ended(self, name: str, namespace: str, bound_s: float = 5.0) -> bool:
        """Whether the JobSet has ended (Completed or Failed), read once within `bound_s`; False when unknown."""
        with contextlib.suppress(Exception):  # unknown
            return (await asyncio.wait_for(self.get_status(name, namespace), bound_s)).ended
        return False

    def api_name(self) -> str:
        """Which Kubernetes API, in words (no secret: the endpoint or the connection id)."""
        c = self.connection
        if c.get("cluster_url"):
            return f"the Kubernetes API of GKE cluster {c['cluster_url']}"
        if c.get("kubernetes_conn_id"):
            return f"the Kubernetes API of connection {c['kubernetes_conn_id']}"
        if c.get("home"):
            return f"the local cluster's Kubernetes API (home {c['home']})"
        return f"the Kubernetes API ({c.get('kind')})"

    async def watch(self, namespace: str, name: str, resource_version: str | None, outage: OutageClock,
                    tick: Callable[[], float | None], clock: Callable[[], float], log: Any,
                    on_outage: Callable[[OutageClock, float], None] = lambda outage, now: None) -> AsyncIterator[Any]:
        """The JobSet's watch events, re-watching after a watch ends, and None after each `tick()` seconds of
        silence (None: no ticks), until DELETED. `log` is the caller's (the task's log): the outage lines are its,
        and "supervision resumed" when the caller looks again after a gap far above its tick (a stopped or starved
        triggerer, its loop held, a metadata-database outage: docs/deployment.md).

        An outage of the API (Retryable: 429, 5xx, no answer, after the adapter's bounded retries) is waited out
        here, with `outage`'s backoff (honouring Retry-After) and for at most its timeout; then an ApiUnreachable is
        yielded. Any other error is yielded at once; `on_outage` runs at each "unreachable" line.
        """
        queue: asyncio.Queue = asyncio.Queue()
        api, where = self.api, f"JobSet {namespace}/{name}"

        def answered_again() -> None:
            log.info("%s answers again after %.0f s; watching %s", self.api_name(), outage.reset(clock()), where)

        async def say_when_answered(answers_then: Any) -> None:
            # a re-opened watch of a quiet JobSet yields nothing: without this the end of the outage would be said
            # only at the JobSet's next change
            while outage.ongoing:
                await asyncio.sleep(ANSWER_CHECK_S)
                if getattr(api, "failing_since", 0.0) is None and getattr(api, "answers", None) != answers_then \
                        and outage.ongoing:
                    return answered_again()

        async def pump() -> None:
            version, answers_then, said_back = resource_version, None, None
            try:
                while True:
                    began = clock()  # an outage starts with its first failing call, not after its inner retries
                    try:
                        async for event in api.watch(namespace, name, version):
                            if outage.ongoing:
                                answered_again()
                            began = clock()  # it answered: a later failure is a new call's
                            version = event.obj.get("metadata", {}).get("resourceVersion", version)
                            await queue.put(event)
                            if event.type == "DELETED":
                                return
                    except retry.Retryable as exc:
                        answers = getattr(api, "answers", None)
                        if outage.ongoing and answers is not None and answers != answers_then:
                            outage.reset()  # it answered in between: that outage is over, this is a new one
                        answers_then, now = answers, clock()
                        delay = outage.failed(now, retry.describe_failure(exc), retry.retry_after_of(exc),
                                              started=_first_failure(api, began, now))
                        if outage.exhausted(now):
                            raise retry.ApiUnreachable(self.api_name(), outage.elapsed(now), outage.last_status,
                                                       outage.timeout) from exc
                        if outage.should_log(now):
                            log.warning("Kubernetes API unreachable for %.0f s (%s); still watching %s, which is not "
                                        "touched (%s; api_outage_timeout %.0f s, %.0f s left)", outage.elapsed(now),
                                        outage.last_status, where, self.api_name(), outage.timeout,
                                        outage.remaining(now))
                            on_outage(outage, now)
                        if said_back is None or said_back.done():
                            said_back = asyncio.create_task(say_when_answered(answers))
                        await asyncio.sleep(delay)
                        continue
                    await asyncio.sleep(self.poll_interval)  # the watch ended quietly: watch again from version
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # handed to the caller: an Exception to report, others to re-raise
                await queue.put(exc)
            finally:
                if said_back is not None:
                    said_back.cancel()

        task, looked_at = asyncio.create_task(pump()), clock()
        try:
            while True:
                try:
                    item = queue.get_nowait()
                except asyncio.QueueEmpty:
                    try:
                        item = await asyncio.wait_for(queue.get(), timeout=tick())
                    except asyncio.TimeoutError:
                        item = None  # a quiet tick
                now, every = clock(), tick()
                if every is not None and now - looked_at > max(RESUMED_FACTOR * every, RESUMED_MIN_S):
                    log.warning("supervision resumed after %.0f s: %s was not looked at since (one look is due every "
                                "%.0f s; the triggerer was stopped, starved or cut off from Airflow's database "
                                "meanwhile); its state is read now, and nothing was deleted", now - looked_at, where,
                                every)
                looked_at = now
                yield item
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _first_failure(api: Any, began: float, now: float) -> float:
    """When this run of failures began, on the caller's clock: the api's first transient failure since it last
    answered (`failing_since`, wall time), else the start of the call that failed. A watch call lasts as long
    as the JobSet is quiet (hours): its start is no outage's start once the api says when it failed first."""
    since = getattr(api, "failing_since", None)
    if since is None:
        return began
    return max(began, now - max(0.0, time.time() - since))
