from __future__ import annotations

import pytest
from core_helpers import slices

from mtc_provider.core.definition.render.checkpoint_config import (DEFAULT_GCS_FUSE_MOUNT_OPTIONS,
                                                            build_checkpoint_configuration)
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.shape.sizing import ramdisk_size
from mtc_provider.core.definition.shape.tpu import SliceSpec
from tests.conftest import reference_file


def test_shape() -> None:
    config = build_checkpoint_configuration("mtc", "my-bucket", SliceSpec("v5p", "2x2x2", 4), ramdisk_size(70e9, 32))
    assert config == {
        "apiVersion": "checkpointing.gke.io/v1",
        "kind": "CheckpointConfiguration",
        "metadata": {"name": "mtc"},
        "spec": {
            "cloudStorageBucketName": "my-bucket",
            "nodeSelector": {"node.kubernetes.io/instance-type": "ct5p-hightpu-4t"},
            "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
            "inMemoryVolumeSize": "57Gi",
            "gcsFuseMountOptions": list(DEFAULT_GCS_FUSE_MOUNT_OPTIONS),
        },
    }


def test_default_mount_options_are_gkes_example() -> None:
    import yaml

    text = reference_file("gke-mtc-example-checkpointconfiguration.yaml").read_text()
    example = yaml.safe_load(text.replace("!BUCKET!", "bucket"))  # a placeholder that is not valid YAML
    assert list(DEFAULT_GCS_FUSE_MOUNT_OPTIONS) == example["spec"]["gcsFuseMountOptions"]


def test_custom_options_and_limit() -> None:
    config = build_checkpoint_configuration(
        "mtc", "b-1", slices(), ramdisk_size(1e9, 8), gcs_fuse_mount_options=["implicit-dirs"], csi_ephemeral_limit="50Mi"
    )
    assert config["spec"]["gcsFuseMountOptions"] == ["implicit-dirs"]
    assert config["spec"]["csiEphemeralLimit"] == "50Mi"
    assert "mountOptions" not in config["spec"]


@pytest.mark.parametrize(
    "kwargs, field, allowed",
    [
        ({"name": "MTC"}, "checkpoint_configuration.name", "lower-case"),
        ({"bucket_name": "gs://b"}, "bucket.name", "without gs://"),
        ({"gcs_fuse_mount_options": "implicit-dirs"}, "checkpoint_configuration.gcs_fuse_mount_options", "a list"),
        ({"gcs_fuse_mount_options": ["ok", "two words"]}, "checkpoint_configuration.gcs_fuse_mount_options[1]", "without spaces"),
        ({"csi_ephemeral_limit": "lots"}, "checkpoint_configuration.csi_ephemeral_limit", "quantity"),
    ],
)
def test_bad_input(kwargs, field, allowed) -> None:
    args = dict(name="mtc", bucket_name="my-bucket", slices=slices(), size=ramdisk_size(1e9, 8))
    with pytest.raises(SpecError) as caught:
        build_checkpoint_configuration(**dict(args, **kwargs))
    assert caught.value.field == field and allowed in caught.value.allowed
