"""How long a start of the pods may take before the attempt is given up (pure): the run's default startup_timeout.

A pod that never starts (stuck in ContainerCreating because the MTC CSI ramdisk mount fails, or never scheduled)
never fails, so neither does its JobSet: without a bound the watch waits for ever. The launch task bounds each
start of the pods (the first, and each in-cluster restart) with `startup_timeout`; left out of the run description
it is this module's budget, the sum of what a healthy start may need, each part named:

- image pull: the trigger's `image_pull_timeout` (900 s). Kubernetes retries a failing pull with a back-off capped
  at 300 s (kubernetes.io "Images", ImagePullBackOff), and the watch gives pull errors that long before their own
  verdict; the whole start must outlast it, or a pull that heals at 14 minutes would end as a startup timeout.
- nodes: 600 s for the first slice, 60 s more for each further slice (at most 1800 s). A host loss replaces the
  TPU VM before its pods can run, and a start waits for the slowest host of every slice; a budget, not a measured
  figure (GKE publishes none for TPU node start).
- ramdisk mount: 244 s, two retries at the kubelet's longest back-off between failed volume operations (2 m 2 s,
  kubernetes/kubernetes pkg/util/goroutinemap/exponentialbackoff `maxDurationBeforeRetry`), so a mount that fails
  once while the MTC node components start (`FailedMount`) is retried at least twice before the verdict. The
  ramdisk's size adds no time (tmpfs pages are allocated as they are written); whether it fits is checked before
  the launch (core.definition.shape.sizing, readiness against the CheckpointConfiguration).
On the local target the pods are processes on this machine: 60 s for the processes, plus the same image-pull part
(its start faults rehearse GKE's pull errors with the same `image_pull_timeout`).
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGE_PULL_TIMEOUT_S = 900.0  # the trigger's and the launch operator's default image_pull_timeout
NODE_START_S = 600.0
NODE_START_PER_EXTRA_SLICE_S = 60.0
NODE_START_MAX_S = 1800.0
KUBELET_MAX_RETRY_BACKOFF_S = 122.0  # 2m2s
MOUNT_RETRIES = 2
LOCAL_PROCESSES_S = 60.0


@dataclass(frozen=True)
class StartupBudget:
    """The parts of a start of the pods, in seconds, and their sum (the default startup_timeout)."""

    image_pull: float
    nodes: float
    mount: float

    @property
    def total(self) -> float:
        return self.image_pull + self.nodes + self.mount

    def line(self) -> str:
        return (f"startup_timeout {self.total:.0f}s = image pull {self.image_pull:.0f}s + nodes {self.nodes:.0f}s + "
                f"ramdisk mount {self.mount:.0f}s")


def startup_budget(target: str, num_slices: int, image_pull_timeout: float = IMAGE_PULL_TIMEOUT_S) -> StartupBudget:
    """The default bound of one start of the pods for this run (the rule above, in one place)."""
    from mtc_provider.core.basics.kind_rules import rules_for

    if rules_for(target).local_processes:
        return StartupBudget(float(image_pull_timeout), LOCAL_PROCESSES_S, 0.0)
    nodes = min(NODE_START_MAX_S, NODE_START_S + NODE_START_PER_EXTRA_SLICE_S * max(0, num_slices - 1))
    mount = KUBELET_MAX_RETRY_BACKOFF_S * MOUNT_RETRIES
    return StartupBudget(float(image_pull_timeout), nodes, mount)
