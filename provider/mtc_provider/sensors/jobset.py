"""Wait for an existing JobSet (launched elsewhere) to end; deferrable by default like the launch operator."""

from __future__ import annotations

from datetime import timedelta
from functools import cached_property
from typing import Any, Sequence

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.core.attempt.status import SUCCEEDED, evaluate_jobset
from mtc_provider.core.basics.vocabulary import DEFAULT_POLL_INTERVAL_S
from mtc_provider.hooks.jobset import MtcJobSetHook
from mtc_provider.operators.base import JOBSET_TARGET_FIELDS, JobSetTargetMixin


class MtcJobSetSensor(JobSetTargetMixin, BaseSensorOperator):
    """Succeed when JobSet `namespace/name` completes; fail (for good) when it fails or disappears.

    The sensor does not own the JobSet: killing the sensor never deletes it.

    :param name: the JobSet to wait for (templated).
    :param namespace: its namespace.
    :param poll_interval: seconds between polls when the watch cannot be used.
    :param deferrable: wait in the triggerer (default: Airflow's operators.default_deferrable).

    The target, the Kubernetes connection and the google provider's parameters (target, kubernetes_conn_id,
    gcp_conn_id, impersonation_chain, project_id, location, cluster_name, use_dns_endpoint) are
    JobSetTargetMixin's: which one wins, as on MtcJobSetOperator (target.with_google).
    """

    template_fields: Sequence[str] = ("name", "namespace", *JOBSET_TARGET_FIELDS)

    def __init__(self, *, name: str, namespace: str = "default", poll_interval: float = DEFAULT_POLL_INTERVAL_S,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.name = name
        self.namespace = namespace
        self.poll_interval = poll_interval
        self.deferrable = deferrable

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        obj = self.hook.api.get(self.namespace, self.name)
        state = evaluate_jobset(obj)
        if state.ended:
            return self._result(state)
        from mtc_provider.core.attempt.launch_options import WatchSettings, WatchTimes
        from mtc_provider.triggers.jobset import JobSetTrigger  # imported where it runs: DAG files stay light

        self.defer(
            trigger=JobSetTrigger(connection=self.hook.connection, namespace=self.namespace, name=self.name,
                                  resource_version=obj["metadata"].get("resourceVersion"),
                                  restarts_seen=state.restarts, delete_on_kill=False,
                                  watch=WatchSettings(times=WatchTimes(poll_interval=float(self.poll_interval)))),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    @cached_property
    def hook(self) -> MtcJobSetHook:
        """The JobSet client of this sensor, its connection resolved once (on GKE the cluster's endpoint and CA)."""
        return MtcJobSetHook(connection=self._connection())

    def poke(self, context: Any) -> PokeReturnValue:
        state = self.hook.status(self.name, self.namespace)
        self.log.info("%s", state.describe())
        if state.ended:  # the same XCom as the deferred path
            return PokeReturnValue(is_done=True, xcom_value=self._result(state))
        return PokeReturnValue(is_done=False)

    def _result(self, state) -> dict[str, Any]:
        if state.phase != SUCCEEDED:
            raise AirflowFailException(f"JobSet {self.namespace}/{self.name} failed: {state.reason}: {state.message}")
        return {"jobset_name": state.name, "namespace": state.namespace, "restarts": state.restarts,
                "phase": state.phase}

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from mtc_provider.core.attempt.jobset_events import ENDED, JobSetEvent

        ev = JobSetEvent.from_payload(event)
        if ev.kind == ENDED and ev.state is not None:
            return self._result(ev.state)
        # The trigger's messages may already start with their kind ("stalled: no new finalized checkpoint ..."):
        # name it once.
        said = ev.message if ev.message.startswith(f"{ev.kind}:") else f"{ev.kind}: {ev.message}"
        raise AirflowFailException(f"JobSet {ev.namespace}/{ev.name}: {said}")

