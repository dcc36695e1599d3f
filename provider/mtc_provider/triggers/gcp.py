"""Triggers for the GCP control plane: a GKE operation, and cluster readiness.

They carry only primitives (ids, connection id, impersonation chain, endpoint, poll interval), never a
token: each poll builds its client from the connection, so a long wait never outlives a token. Blocking
client calls run in a worker thread, never in the triggerer's event loop.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from mtc_provider.core.basics.errors import OperationFailed
from mtc_provider.core.basics.payload import Payload
from mtc_provider.triggers import init_kwargs
from mtc_provider.core.definition.cluster.readiness import all_ok


@dataclass(frozen=True)
class OperationEvent(Payload):
    status: str  # "done" | "error"
    operation: str
    message: str = ""


@dataclass(frozen=True)
class ReadinessEvent(Payload):
    status: str  # "ready" | "timeout" | "error"
    checks: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""


class GkeOperationTrigger(BaseTrigger):
    """Polls one GKE long-running operation until DONE; the event says done or error (with the message).

    :param operation: the operation's name (as GKE returned it).
    :param target: the GKE target as a dict (GkeTarget.to_dict()).
    :param api_endpoint: a Container API endpoint override; None: the default.
    :param poll_interval: seconds between polls.
    """

    def __init__(self, operation: str, target: dict[str, Any], api_endpoint: str | None = None,
                 poll_interval: float = 15.0) -> None:
        super().__init__()
        self.operation = operation
        self.target = target
        self.api_endpoint = api_endpoint
        self.poll_interval = poll_interval

    serialize = init_kwargs

    def _poll(self) -> bool:
        from mtc_provider.targets.gke.cluster import operation_done
        from mtc_provider.targets import backend_for

        control_plane = backend_for(self.target, self.api_endpoint).cluster.control_plane()
        return operation_done(control_plane.operation(self.operation))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                done = await asyncio.to_thread(self._poll)
            except OperationFailed as exc:
                yield TriggerEvent(OperationEvent("error", self.operation, str(exc)).to_payload())
                return
            except Exception as exc:  # noqa: BLE001 - reported to the task, which raises it
                yield TriggerEvent(OperationEvent("error", self.operation, f"{type(exc).__name__}: {exc}").to_payload())
                return
            if done:
                yield TriggerEvent(OperationEvent("done", self.operation).to_payload())
                return
            await asyncio.sleep(self.poll_interval)


class ClusterReadinessTrigger(BaseTrigger):
    """Re-evaluates readiness every poll_interval until every check passes or `deadline` (unix s) passes.

    :param target: the target as a dict (GkeTarget or LocalTarget .to_dict()).
    :param slices: the SliceSpec's fields: the node pools to look for.
    :param deadline: give up at this time (unix s).
    :param sizing: {parameters, bytes_per_parameter, buffer}: checks the nodes' memory can hold the ramdisk.
    :param checkpoint_configuration_name: also check this CheckpointConfiguration exists and serves the run;
        None: skip the check.
    :param api_endpoint: a Container API endpoint override; None: the default.
    :param poll_interval: seconds between evaluations.
    :param bucket_name: the run's bucket, which the CheckpointConfiguration must name.
    :param capacity: [capacity, reservation] the TPU node pools must have (core.definition.shape.capacity); None:
        on-demand.
    """

    def __init__(self, target: dict[str, Any], slices: dict[str, Any], deadline: float,
                 sizing: dict[str, Any] | None = None, checkpoint_configuration_name: str | None = None,
                 api_endpoint: str | None = None, poll_interval: float = 60.0, bucket_name: str | None = None,
                 capacity: list[str] | None = None) -> None:
        super().__init__()
        self.target = target
        self.slices = slices
        self.deadline = deadline
        self.sizing = sizing
        self.checkpoint_configuration_name = checkpoint_configuration_name
        self.api_endpoint = api_endpoint
        self.poll_interval = poll_interval
        self.bucket_name = bucket_name
        self.capacity = list(capacity or ["on-demand", ""])

    serialize = init_kwargs

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from mtc_provider.targets import backend_for

        cluster = backend_for(self.target, self.api_endpoint).cluster
        while True:
            try:
                checks = await asyncio.to_thread(cluster.readiness, self.slices, self.sizing,
                                                 self.checkpoint_configuration_name, self.bucket_name,
                                                 tuple(self.capacity))
            except Exception as exc:  # noqa: BLE001 - the task raises it with the message
                yield TriggerEvent(ReadinessEvent("error", [], f"{type(exc).__name__}: {exc}").to_payload())
                return
            payload = [check.to_dict() for check in checks]
            if all_ok(checks):
                yield TriggerEvent(ReadinessEvent("ready", payload).to_payload())
                return
            if time.time() + self.poll_interval > self.deadline:
                yield TriggerEvent(ReadinessEvent("timeout", payload).to_payload())
                return
            await asyncio.sleep(self.poll_interval)
