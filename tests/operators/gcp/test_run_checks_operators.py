"""Operators used directly make the checks `mtc plan` makes (issue #24, item 6), before any call.

The fakes (tests/doubles) record every request they receive: a refusal must leave them untouched.
"""

from __future__ import annotations

import pytest

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.operators.gcp import MtcApplyCheckpointConfigurationOperator, MtcClusterReadinessOperator
from mtc_provider.sensors.gcp import MtcClusterReadinessSensor
from mtc_provider.target import GkeTarget

from tests.support.gcp_fixtures import CLUSTER, LOCATION, PROJECT

SLICES = {"tpu_type": "v6e", "topology": "4x8", "num_slices": 2, "machine_type": "ct6e-standard-4t"}


class TI:
    def __init__(self) -> None:
        self.xcoms: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcoms[key] = value


def _apply(container, **overrides) -> MtcApplyCheckpointConfigurationOperator:
    kwargs = dict(task_id="c", target=GkeTarget(PROJECT, LOCATION, CLUSTER), api_endpoint=container.url,
                  name="mtc-config", bucket_name="ckpt", slices=SLICES)
    return MtcApplyCheckpointConfigurationOperator(**{**kwargs, **overrides})


def test_checkpoint_configuration_operator_refuses_a_ramdisk_larger_than_host_memory(container, k8s, gcp_connection):
    # Before: inMemoryVolumeSize 12852251529693603515625Gi was applied for 1e30 parameters.
    op = _apply(container, sizing={"parameters": 1e30})
    with pytest.raises(SpecError) as caught:
        op.execute({})
    assert caught.value.field == "sizing.parameters"
    assert "fits the 720 GiB host memory of ct6e-standard-4t" in caught.value.allowed
    assert container.requests == [] and k8s.requests == []  # refused before any call


def test_checkpoint_configuration_operator_honours_allow_any_buffer(container, k8s, gcp_connection):
    refused = _apply(container, sizing={"parameters": 70e9, "buffer": 0.3})
    with pytest.raises(SpecError) as caught:
        refused.execute({})
    assert caught.value.field == "sizing.buffer" and "allow_any_buffer" in caught.value.allowed
    assert container.requests == [] and k8s.requests == []
    # The error says to set allow_any_buffer: with it, the 30% buffer is applied (the guide's walk-through: 70e9
    # parameters x 12 bytes on 8 hosts = 105 GB per host, doubled 210 GB, x 1.3 = 273 GB = 254.25 GiB -> 255Gi).
    _apply(container, sizing={"parameters": 70e9, "buffer": 0.3, "allow_any_buffer": True}).execute({"ti": TI()})
    assert k8s.checkpoint_configurations["mtc-config"]["spec"]["inMemoryVolumeSize"] == "255Gi"


def test_checkpoint_configuration_operator_refuses_single_host_multislice_on_gke(container, k8s, gcp_connection):
    op = _apply(container, slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2})
    with pytest.raises(SpecError, match="Multislice only supports multi-host TPU slice node pools"):
        op.execute({})
    assert container.requests == [] and k8s.requests == []


def test_readiness_on_gke_checks_host_memory_from_its_sizing(container, k8s, gcp_connection):
    # Before: GkeCluster.readiness ignored `sizing` although the docstring promised a host-memory check.
    op = MtcClusterReadinessOperator(task_id="r", target=GkeTarget(PROJECT, LOCATION, CLUSTER),
                                     api_endpoint=container.url, slices=SLICES, sizing={"parameters": 1e30})
    with pytest.raises(SpecError) as caught:
        op.execute({})
    assert caught.value.field == "sizing.parameters" and "720 GiB" in caught.value.allowed
    assert container.requests == [] and k8s.requests == []


def test_readiness_sensor_checks_host_memory_from_its_sizing(container, k8s, gcp_connection):
    sensor = MtcClusterReadinessSensor(task_id="r", target=GkeTarget(PROJECT, LOCATION, CLUSTER),
                                       api_endpoint=container.url, slices=SLICES, sizing={"parameters": 1e30},
                                       deferrable=False, poke_interval=0.01, timeout=1)
    with pytest.raises(SpecError) as caught:
        sensor.execute({})
    assert caught.value.field == "sizing.parameters"
    assert container.requests == [] and k8s.requests == []


@pytest.mark.parametrize(
    "slices, workload, field",
    [({"tpu_type": "v6e", "topology": "4x8", "num_slices": 2}, {"jobset_name": "1run"}, "workload.jobset_name"),
     ({"tpu_type": "v6e", "topology": "8x16", "num_slices": 2},
      {"jobset_name": "a" * 40, "replicated_job_name": "b" * 15}, "workload.jobset_name"),
     ({"tpu_type": "v6e", "topology": "2x2", "num_slices": 2}, {"jobset_name": "run"}, "slices.topology")],
)
def test_launch_operator_refuses_what_the_webhook_or_gke_refuses_before_any_call(container, k8s, gcp_connection,
                                                                                 slices, workload, field):
    from airflow.sdk.exceptions import AirflowFailException

    from mtc_provider.operators.jobset import MtcJobSetOperator

    op = MtcJobSetOperator(task_id="train", target=GkeTarget(PROJECT, LOCATION, CLUSTER), slices=slices,
                           checkpointing={"run_name": "run", "base_output_directory": "gs://ckpt", "steps": 10},
                           workload={"image": "us-docker.pkg.dev/p/r/maxtext:1", **workload})
    with pytest.raises(AirflowFailException, match=f"invalid spec: {field}: "):
        op.execute({"ti": TI()})
    assert container.requests == [] and k8s.requests == []


@pytest.mark.parametrize("kwargs, field", [({"capacity": "preemptible"}, "capacity"),
                                           ({"capacity": "reservation"}, "reservation"),
                                           ({"bucket_name": "gs://ckpt"}, "bucket_name")])
def test_readiness_sensor_refuses_a_bad_capacity_or_bucket_before_any_call(container, k8s, gcp_connection, kwargs,
                                                                           field):
    sensor = MtcClusterReadinessSensor(task_id="r", target=GkeTarget(PROJECT, LOCATION, CLUSTER),
                                       api_endpoint=container.url, slices=SLICES, deferrable=False,
                                       checkpoint_configuration_name="mtc-config", poke_interval=0.01, timeout=1,
                                       **kwargs)
    with pytest.raises(SpecError) as caught:
        sensor.execute({})
    assert caught.value.field == field
    assert container.requests == [] and k8s.requests == []


def test_the_readiness_trigger_carries_the_bucket_and_the_capacity():
    from mtc_provider.triggers.gcp import ClusterReadinessTrigger

    trigger = ClusterReadinessTrigger({"kind": "gke"}, SLICES, 0.0, checkpoint_configuration_name="mtc-config",
                                      bucket_name="ckpt", capacity=["reservation", "tpu-res"])
    path, kwargs = trigger.serialize()
    again = ClusterReadinessTrigger(**kwargs)
    assert (again.bucket_name, again.capacity) == ("ckpt", ["reservation", "tpu-res"])
