"""GKE's CheckpointConfiguration: which nodes get the MTC ramdisk, how big it is, and which bucket backs it.

Cluster-scoped (no namespace). The gcsfuse options go in `spec.gcsFuseMountOptions`: a widely used tool
writes `spec.mountOptions`, which is not in the CRD schema and is silently dropped by the API server.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.field_rules import check_gcsfuse_option
from mtc_provider.core.definition.description.locations import check_bucket_name
from mtc_provider.core.basics.names import check_checkpoint_configuration_name
from mtc_provider.core.definition.shape.sizing import RamdiskSize
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.core.basics.vocabulary import CHECKPOINT_CONFIGURATION

API_VERSION = CHECKPOINT_CONFIGURATION.api_version
KIND = CHECKPOINT_CONFIGURATION.kind
PLURAL = CHECKPOINT_CONFIGURATION.plural
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# GKE's own example CheckpointConfiguration (multitier scale tests) uses these gcsfuse options.
DEFAULT_GCS_FUSE_MOUNT_OPTIONS: tuple[str, ...] = (
    "implicit-dirs",
    "metadata-cache:negative-ttl-secs:0",
    "metadata-cache:ttl-secs:-1",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-cache:max-size-mb:-1",
    "file-cache:cache-file-for-range-read:true",
    "file-system:kernel-list-cache-ttl-secs:0",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
    "write:enable-streaming-writes:true",
)
QUANTITY_ALLOWED = "a Kubernetes quantity such as 50Mi or 1Gi"
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")


def _mount_options(options: Sequence[str] | None) -> list[str]:
    if options is None:
        return list(DEFAULT_GCS_FUSE_MOUNT_OPTIONS)
    if isinstance(options, str):
        raise SpecError("checkpoint_configuration.gcs_fuse_mount_options", options, "a list of option strings, not one string")
    checked = []
    for index, option in enumerate(options):
        if not isinstance(option, str) or not option or any(char.isspace() for char in option):
            raise SpecError(
                f"checkpoint_configuration.gcs_fuse_mount_options[{index}]",
                option,
                "a non-empty gcsfuse option without spaces, e.g. implicit-dirs or metadata-cache:ttl-secs:-1",
            )
        check_gcsfuse_option(f"checkpoint_configuration.gcs_fuse_mount_options[{index}]", option)
        checked.append(option)
    return checked


def _quantity(value: str) -> str:
    if not isinstance(value, str) or not QUANTITY_RE.match(value):
        raise SpecError("checkpoint_configuration.csi_ephemeral_limit", value, QUANTITY_ALLOWED)
    return value


def build_checkpoint_configuration(name: str, bucket_name: str, slices: SliceSpec, size: RamdiskSize,
                                   gcs_fuse_mount_options: Sequence[str] | None = None,
                                   csi_ephemeral_limit: str | None = None) -> dict[str, Any]:
    """The CheckpointConfiguration for the TPU nodes of `slices`, with a ramdisk of `size` per host."""
    check_checkpoint_configuration_name(name)
    check_bucket_name(bucket_name)
    spec: dict[str, Any] = {"cloudStorageBucketName": bucket_name,
                            "nodeSelector": {INSTANCE_TYPE_LABEL: slices.machine_type},
                            "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
                            "inMemoryVolumeSize": size.quantity}
    if csi_ephemeral_limit is not None:
        spec["csiEphemeralLimit"] = _quantity(csi_ephemeral_limit)
    spec["gcsFuseMountOptions"] = _mount_options(gcs_fuse_mount_options)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
