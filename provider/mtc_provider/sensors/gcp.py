"""Wait until a cluster (or the local machine) passes every MTC readiness check; fail with the report on timeout."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Sequence

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowSensorTimeout

from mtc_provider.core.basics.errors import NotReady
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.links.gcp import GkeClusterLink
from mtc_provider.operators.base import TARGET_FIELDS, TargetMixin
from mtc_provider.operators.gcp import checked_configuration_names, checked_run, slices_dict

if TYPE_CHECKING:  # readiness checks and the trigger are imported where they run: DAG files stay light
    from mtc_provider.core.definition.cluster.readiness import Check


class MtcClusterReadinessSensor(TargetMixin, BaseSensorOperator):
    """Wait until the cluster (or the local machine) passes every readiness check, then push the report.

    The target and the google provider's parameters (target, gcp_conn_id, impersonation_chain, project_id, location,
    cluster_name, use_dns_endpoint) are TargetMixin's.

    :param slices: SliceSpec or dict (tpu_type, topology, num_slices, machine_type): the node pools to look for.
    :param sizing: {parameters, bytes_per_parameter, buffer, allow_any_buffer}: the ramdisk must fit the machine
        type's memory (refused before any call, as `mtc plan` refuses it); None: the guide's defaults.
    :param checkpoint_configuration_name: also check this CheckpointConfiguration exists and serves the run
        (nodeSelector, bucket, inMemoryVolumeSize: see MtcClusterReadinessOperator); None: skip the check.
    :param bucket_name: the run's bucket, which the CheckpointConfiguration must back the ramdisk up to.
    :param capacity: on-demand, spot or reservation: on GKE enough node pools of the slices' shape must have it.
    :param reservation: the reservation's name when capacity is reservation.
    :param api_endpoint: a Container API endpoint override; None: the default.
    :param deferrable: wait in the triggerer (default: Airflow's operators.default_deferrable).
    """
    template_fields: Sequence[str] = (*TARGET_FIELDS, "slices", "sizing", "checkpoint_configuration_name",
                                      "bucket_name", "capacity", "reservation", "api_endpoint")
    operator_extra_links = (GkeClusterLink(),)

    def __init__(self, *, slices: SliceSpec | dict[str, Any], sizing: dict[str, Any] | None = None,
                 checkpoint_configuration_name: str | None = None, bucket_name: str | None = None,
                 capacity: str = "on-demand", reservation: str = "", api_endpoint: str | None = None,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slices = slices
        self.sizing = sizing
        self.checkpoint_configuration_name = checkpoint_configuration_name
        self.bucket_name = bucket_name
        self.capacity = capacity
        self.reservation = reservation
        self.api_endpoint = api_endpoint
        self.deferrable = deferrable
        self._last: list[Check] = []

    def _report(self, context: Any, checks: list[Check]) -> dict[str, Any]:
        from mtc_provider.core.definition.cluster.readiness import all_ok

        target = self._target()
        report = {"target": target.kind, "ready": all_ok(checks), "checks": [c.to_dict() for c in checks]}
        context["ti"].xcom_push(key="readiness", value=report)
        return report

    def poke(self, context: Any) -> PokeReturnValue:
        from mtc_provider.targets import backend_for
        from mtc_provider.core.definition.cluster.readiness import summary

        backend = backend_for(self._target(), self.api_endpoint)
        from mtc_provider.core.definition.shape.capacity import check_capacity

        checks = backend.cluster.readiness(slices_dict(self.slices), self.sizing, self.checkpoint_configuration_name,
                                           self.bucket_name or None, check_capacity(self.capacity, self.reservation))
        self._last = checks
        report = self._report(context, checks)
        if not report["ready"]:
            self.log.info("not ready yet:\n%s", summary(checks))
        return PokeReturnValue(is_done=report["ready"], xcom_value=report)

    def execute(self, context: Any) -> Any:
        from mtc_provider.core.definition.cluster.readiness import summary
        from mtc_provider.triggers.gcp import ClusterReadinessTrigger

        from mtc_provider.targets import backend_for

        target = self._target()
        checked_run(target.kind, self.slices, self.sizing)  # the run description's checks, before any call
        checked_configuration_names(self.checkpoint_configuration_name, self.bucket_name)
        from mtc_provider.core.definition.shape.capacity import check_capacity

        capacity = check_capacity(self.capacity, self.reservation)
        console = backend_for(target, self.api_endpoint).console
        if console is not None:
            GkeClusterLink.persist(context, **dataclasses.asdict(console))
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout as exc:
                raise AirflowSensorTimeout(f"not ready after {self.timeout} s:\n{summary(self._last)}") from exc
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        self.defer(trigger=ClusterReadinessTrigger(
            target.to_dict(), slices_dict(self.slices), time.time() + float(self.timeout), self.sizing,
            self.checkpoint_configuration_name, self.api_endpoint, float(self.poke_interval), self.bucket_name or None,
            list(capacity)),
            method_name="execute_complete")

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from mtc_provider.core.definition.cluster.readiness import Check, summary
        from mtc_provider.triggers.gcp import ReadinessEvent

        result = ReadinessEvent.from_payload(event)
        if result.status == "error":
            raise NotReady(f"readiness could not be evaluated: {result.message}")
        checks = [Check.from_dict(c) for c in result.checks]
        report = self._report(context, checks)
        if result.status == "timeout":
            # A timeout is final: AirflowSensorTimeout is not retried.
            raise AirflowSensorTimeout(f"not ready after {self.timeout} s:\n{summary(checks)}")
        return report
