"""A fourth target kind, registered only by its entry point: JobSets in an in-memory cluster per home
(tests/doubles/memory_jobset.py), checkpoints in the home's folders, and rules of its own (a 3 s poll, a 45 s grace
period, one workload called "toy", no faults)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from mtc_provider.core.basics.kind_rules import KindRules
from mtc_provider.targets.common import InjectsNoFaults, ListsCheckpointsByPath
from mtc_provider.targets.registry import TargetKind
from tests.doubles.memory_jobset import AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster

CLUSTERS: dict[str, MemoryJobSetCluster] = {}


def cluster(home: str) -> MemoryJobSetCluster:
    """The home's in-memory cluster (one per home, as a cluster is)."""
    return CLUSTERS.setdefault(home, MemoryJobSetCluster())


@dataclass
class FourthTarget:
    home: str = "/tmp/mtc-fourth"
    namespace: str = "default"
    template_fields: Sequence[str] = field(default=("home",), repr=False, compare=False)
    kind: str = field(default="fourth", init=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("template_fields")
        return data


class FourthCluster:
    """Nothing to check before a launch: the in-memory cluster is always there."""

    def readiness(self, slices, sizing, checkpoint_configuration_name, bucket_name=None, capacity=("on-demand", "")):
        return []

    def kubernetes_client_factory(self):
        raise NotImplementedError("no cluster-scoped objects in the fourth kind's cluster")

    def provided_by_target(self, step, total_hosts):
        return "does not apply on the fourth kind"

    def control_plane(self):
        raise NotImplementedError


@dataclass
class FourthBackend(ListsCheckpointsByPath, InjectsNoFaults):
    target: FourthTarget
    api_endpoint: Any = None
    console: Any = None

    def __post_init__(self) -> None:
        self.cluster = FourthCluster()

    def jobset_connection(self) -> dict[str, Any]:
        return {"kind": "fourth", "home": self.target.home}

    def bucket(self):
        raise NotImplementedError("the fourth kind keeps checkpoints in folders")

    def google(self) -> tuple[str, Any]:
        return "google_cloud_default", None


def target_fields(config: Any, local_home: str, gcp_conn_id: str) -> dict[str, Any]:
    return {"home": local_home, "namespace": config.workload.namespace}


RULES = KindRules(local_processes=True, poll_interval=3.0, termination_grace_period_seconds=45,
                  workloads={"toy": ("python", "-m", "mtc_fourth_kind.workload")}, target_fields=target_fields)

KIND = TargetKind("fourth", FourthTarget, FourthBackend,
                  lambda connection, **_: MemoryJobSetApi(cluster(connection["home"])),
                  lambda connection, **_: AsyncMemoryJobSetApi(cluster(connection["home"])),
                  lambda connection: f"the fourth kind's cluster of {connection['home']}", rules=RULES)
