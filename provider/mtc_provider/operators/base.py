"""Where a task's run goes: the target and the google provider's parameter names, once for every operator and sensor.

The google provider's GKE operators share theirs the same way (`GKEOperatorMixin.template_fields` in
airflow/providers/google/cloud/operators/kubernetes_engine.py): a base that the operators and sensors mix in,
`class MtcJobSetSensor(JobSetTargetMixin, BaseSensorOperator)`. The mixins are BaseOperator subclasses so that
Airflow's operator metaclass wraps their `__init__` too (airflow/sdk/bases/operator.py, BaseOperatorMeta): a DAG's
`default_args` (say `gcp_conn_id`) reach these arguments, and `.partial()` / `.expand()` accept them, as when every
operator listed them itself. Each argument is set as an attribute of the same name in `__init__`, which is what
Airflow renders for `template_fields`.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.target import GOOGLE_PARAMETERS, Target, google_parameters, with_google

# Every task that reaches a target templates these.
TARGET_FIELDS = ("target", *GOOGLE_PARAMETERS)
# ... and a task that reaches a JobSet also its Kubernetes connection.
JOBSET_TARGET_FIELDS = (*TARGET_FIELDS, "kubernetes_conn_id")


class TargetMixin(BaseOperator):
    """The target of a task and the google provider's parameter names (GKEStartJobOperator's), beside it.

    Which one wins when both are given: `target.with_google`; every error comes before any call.

    :param target: a target object (GkeTarget, LocalTarget, KubernetesTarget, or an installed kind's) or its dict
        (its `kind`: any of `mtc_provider.targets.kinds()`); None: local, where mtc-local is installed (elsewhere
        refused, naming the installed kinds) (templated).
    :param gcp_conn_id: the Google connection for every GKE, GCS and IAM call (templated; default: the target's).
    :param impersonation_chain: service account(s) to impersonate for every call (templated; default: the target's).
    :param project_id: the cluster's project (templated; default: the target's, else the connection's project).
    :param location: with cluster_name, the GKE cluster's location, instead of a target (templated). With a GKE
        target both must agree; any other target is an error.
    :param cluster_name: with location, the GKE cluster's name, instead of a target (templated).
    :param use_dns_endpoint: reach the control plane through its DNS-based endpoint (templated; default: the
        target's, False), as the google provider's GKE operators do.
    """

    template_fields: Sequence[str] = TARGET_FIELDS
    kubernetes_conn_id: str | None = None  # JobSetTargetMixin's argument; a task that reaches only GKE has none

    def __init__(self, *, target: Target | dict[str, Any] | None = None, gcp_conn_id: str | None = None,
                 impersonation_chain: str | Sequence[str] | None = None, project_id: str | None = None,
                 location: str | None = None, cluster_name: str | None = None, use_dns_endpoint: bool | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.project_id = project_id
        self.location = location
        self.cluster_name = cluster_name
        self.use_dns_endpoint = use_dns_endpoint

    def _target(self) -> Target:
        """The target from `target` and this task's GOOGLE_PARAMETERS (raises SpecError naming the field)."""
        return with_google(self.target, **google_parameters(self), kubernetes_conn_id=self.kubernetes_conn_id)


class JobSetTargetMixin(TargetMixin):
    """A TargetMixin that reaches JobSets: also a Kubernetes connection, and the JobSet connection dict.

    :param kubernetes_conn_id: use this cncf.kubernetes connection instead of GKE credentials (templated); with
        location and cluster_name it is an error (one cluster).
    """

    template_fields: Sequence[str] = JOBSET_TARGET_FIELDS

    def __init__(self, *, kubernetes_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kubernetes_conn_id = kubernetes_conn_id

    def _connection(self) -> dict[str, Any]:
        """The serializable JobSet connection (targets.connection_for); a bad target fails the task for good."""
        from mtc_provider import targets

        try:
            target = self._target()
        except SpecError as exc:
            raise AirflowFailException(f"invalid spec: {exc}") from exc
        return targets.connection_for(target, self.kubernetes_conn_id)
