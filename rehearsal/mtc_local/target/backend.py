"""The local target's backend: the home's local Kubernetes API server (started on demand) and its local GCS,
reached with the same hooks and adapters as GKE and GCS; readiness is this machine's facts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mtc_local.target import LocalTarget
from mtc_provider.targets.common import ListsCheckpointsByPath

# The control-plane steps the local runner provides itself, and why.
PROVIDED = {
    "enable_checkpointing": "does not apply locally: the local runner provides ramdisks itself",
    "tpu_node_pools": "does not apply locally: the local runner starts {hosts} host processes",
}


@dataclass
class LocalCluster:
    target: LocalTarget

    def control_plane(self) -> Any:
        raise NotImplementedError("the local target has no managed control plane")  # provided_by_target says why

    def provided_by_target(self, step: str, total_hosts: int) -> str | None:
        return PROVIDED[step].format(hosts=total_hosts)

    def kubernetes_client_factory(self) -> Any:
        from mtc_local.target.cluster import client_factory

        return client_factory(self.target.home)

    def readiness(self, slices: dict[str, Any], sizing: dict[str, Any] | None,
                  checkpoint_configuration_name: str | None, bucket_name: str | None = None,
                  capacity: tuple[str, str] = ("on-demand", "")) -> list[Any]:
        """This machine's facts; no CheckpointConfiguration is checked (no MTC CSI driver runs here: the runner
        mounts each host's ramdisk itself)."""
        from mtc_local.target.machine import evaluate_local_machine, machine_facts
        from mtc_provider.core.definition.description.spec import SizingSpec
        from mtc_provider.core.definition.shape.tpu import SliceSpec

        spec = SliceSpec(**slices)
        size = SizingSpec(**(sizing or {}))
        per_host = size.size(spec.hosts_per_slice)
        return evaluate_local_machine(machine_facts(), spec.total_hosts, per_host.total_bytes)


@dataclass
class LocalBackend(ListsCheckpointsByPath):
    target: LocalTarget
    api_endpoint: str | None = None  # no managed control plane: unused
    console: None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.cluster = LocalCluster(self.target)

    def jobset_connection(self) -> dict[str, Any]:
        return {"kind": "local", "home": self.target.home}  # the token stays in <home>/kubeconfig

    def bucket(self) -> Any:
        from mtc_provider.adapters.gcs_bucket import LOCAL_LOCATION, BucketAccess
        from mtc_local.target.gcs import local_gcs_hook
        from mtc_provider.adapters.gcs_endpoint import LOCAL_PROJECT, LOCAL_PROJECT_NUMBER

        client = local_gcs_hook(self.target.home).get_conn()  # the home's token, read here
        return BucketAccess(client, LOCAL_PROJECT, LOCAL_LOCATION, LOCAL_PROJECT_NUMBER)

    def google(self) -> tuple[str, Any]:
        return "google_cloud_default", None  # only read for a gs:// checkpoint folder

    def put_fault_plan(self, body: dict[str, Any], plan: Any) -> None:
        """The local runner reads the plan from the JobSet's annotation when it is created (runner/faults.py)."""
        from mtc_local.runner.manifest import FAULT_PLAN_ANNOTATION

        if plan:
            body["metadata"].setdefault("annotations", {})[FAULT_PLAN_ANNOTATION] = json.dumps(plan)
