"""Bad input is rejected before any side effect, and the error names the field AND what is allowed."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from core_helpers import checkpointing, run_config, slices, workload

from mtc_provider.core.errors import SpecError
from mtc_provider.core.locations import check_bucket_location, check_bucket_name
from mtc_provider.core.names import check_jobset_name, check_run_name
from mtc_provider.core.sizing import ramdisk_size
from mtc_provider.core.spec import BucketSpec, ClusterSpec, RunConfig
from mtc_provider.core.tpu import SliceSpec
from mtc_provider.core.versions import GkeVersion, require_later_than

# (case id, action, field named in the error, substrings the "allowed" text must contain)
CASES: list[tuple[str, Callable[[], Any], str, tuple[str, ...]]] = [
    # --- locations
    ("zone-as-bucket-location", lambda: check_bucket_location("us-central1-a"), "bucket.location", ("region us-central1", "not a zone")),
    ("zone-in-bucket-spec", lambda: BucketSpec("my-bucket", "europe-west4-b"), "bucket.location", ("region europe-west4",)),
    ("nonsense-location", lambda: check_bucket_location("moon"), "bucket.location", ("region", "multi-region")),
    ("gs-prefixed-bucket-name", lambda: check_bucket_name("gs://my-bucket"), "bucket.name", ("without gs://",)),
    ("upper-case-bucket-name", lambda: check_bucket_name("My_Bucket"), "bucket.name", ("lower-case",)),
    # --- topology and TPU type
    ("trailing-x-topology", lambda: slices(topology="4x4x"), "slices.topology", ("joined by 'x'", "4x8")),
    ("3d-topology-on-v6e", lambda: slices(topology="2x2x2"), "slices.topology", ("2 dimensions",)),
    ("2d-topology-on-v5p", lambda: SliceSpec("v5p", "4x4", 2), "slices.topology", ("3 dimensions", "2x2x2")),
    ("zero-in-topology", lambda: slices(topology="0x8"), "slices.topology", ("positive integers",)),
    ("v3-tpu-type", lambda: slices(tpu_type="v3"), "slices.tpu_type", ("v4", "v5e", "v5p", "v6e")),
    ("one-slice", lambda: slices(num_slices=1), "slices.num_slices", (">= 2", "multi-slice")),
    ("wrong-machine-type", lambda: slices(machine_type="ct5p-hightpu-4t"), "slices.machine_type", ("ct6e-standard-4t",)),
    ("topology-not-divisible", lambda: SliceSpec("v6e", "1x2", 2, "ct6e-standard-8t"), "slices.topology", ("divisible by 8",)),
    # --- sizing
    ("zero-hosts", lambda: ramdisk_size(70e9, 0), "sizing.hosts_per_slice", ("positive integer",)),
    ("negative-parameters", lambda: ramdisk_size(-1, 32), "sizing.parameters", ("positive",)),
    ("text-parameters", lambda: ramdisk_size("seventy billion", 32), "sizing.parameters", ("70e9",)),
    ("fractional-parameters", lambda: ramdisk_size("1.5", 32), "sizing.parameters", ("whole number",)),
    ("buffer-too-large", lambda: ramdisk_size(70e9, 32, buffer=0.5), "sizing.buffer", ("0.10 and 0.15",)),
    ("zero-bytes-per-param", lambda: ramdisk_size(70e9, 32, bytes_per_parameter=0), "sizing.bytes_per_parameter", ("positive",)),
    # --- versions
    ("exactly-the-minimum-version", lambda: require_later_than("1.32.3-gke.1170000"), "cluster_version", ("later than 1.32.3-gke.1170000",)),
    ("older-version", lambda: require_later_than("1.31.9-gke.9999999"), "cluster_version", ("later than 1.32.3-gke.1170000",)),
    ("unparsable-version", lambda: GkeVersion.parse("latest"), "cluster_version", ("MAJOR.MINOR.PATCH",)),
    # --- names
    ("upper-case-run-name", lambda: check_run_name("Run-1"), "checkpointing.run_name", ("lower-case",)),
    ("run-name-trailing-dash", lambda: checkpointing(run_name="run-"), "checkpointing.run_name", ("ending with a letter or digit",)),
    ("too-long-jobset-name", lambda: check_jobset_name("a" * 41), "workload.jobset_name", ("at most 40",)),
    ("underscore-namespace", lambda: workload(namespace="my_ns"), "workload.namespace", ("lower-case",)),
    # --- checkpointing spec
    ("relative-ramdisk-path", lambda: checkpointing(local_checkpoint_directory="local"), "checkpointing.local_checkpoint_directory", ("absolute path",)),
    ("system-dir-ramdisk", lambda: checkpointing(local_checkpoint_directory="/etc"), "checkpointing.local_checkpoint_directory", ("not a system location",)),
    ("local-period-equal-persistent", lambda: checkpointing(local_checkpoint_period=100, checkpoint_period=100), "checkpointing.local_checkpoint_period", ("smaller than checkpoint_period (100)",)),
    ("local-period-above-persistent", lambda: checkpointing(local_checkpoint_period=500, checkpoint_period=100), "checkpointing.local_checkpoint_period", ("smaller than checkpoint_period",)),
    ("emergency-without-checkpointing", lambda: checkpointing(enable_checkpointing=False), "checkpointing.enable_checkpointing", ("true when enable_emergency_checkpoint",)),
    ("string-bool-flag", lambda: checkpointing(async_checkpointing="yes"), "checkpointing.async_checkpointing", ("true or false",)),
    ("zero-steps", lambda: checkpointing(steps=0), "checkpointing.steps", ("positive integer",)),
    ("relative-output-dir", lambda: checkpointing(base_output_directory="out"), "checkpointing.base_output_directory", ("gs://", "absolute")),
    ("negative-max-restarts", lambda: workload(max_restarts=-1), "workload.max_restarts", (">= 0",)),
    ("shell-string-command", lambda: workload(command=()), "workload.command", ("no shell string",)),
    # --- whole run description
    ("unknown-target", lambda: run_config(target="aws"), "target", ("gke", "local")),
    ("unknown-key", lambda: run_config(checkpointing={"checkpoint_every": 5}), "checkpointing.checkpoint_every", ("known keys", "checkpoint_period")),
    ("missing-section", lambda: RunConfig.from_dict({"slices": {}, "checkpointing": {}}), "workload", ("a 'workload' section",)),
    ("missing-required-key", lambda: run_config(workload={"jobset_name": None}), "workload.jobset_name", ("required",)),
    ("local-dir-on-gke", lambda: run_config(checkpointing={"base_output_directory": "/data"}), "checkpointing.base_output_directory", ("gs:// URL on the gke target",)),
    ("gke-without-bucket", lambda: RunConfig.from_dict({k: v for k, v in run_config_dict().items() if k != "bucket"}), "bucket", ("a bucket section",)),
    ("cluster-bad-project-number", lambda: ClusterSpec("p", "us-central1", "c", project_number="12a"), "cluster.project_number", ("digits",)),
]


def run_config_dict() -> dict:
    from core_helpers import gke_config

    return gke_config()


def test_there_are_at_least_25_cases() -> None:
    assert len(CASES) >= 25


@pytest.mark.parametrize("action, field, allowed", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_names_field_and_allowed_values(action, field, allowed) -> None:
    with pytest.raises(SpecError) as caught:
        action()
    error = caught.value
    assert error.field == field
    for text in allowed:
        assert text in error.allowed, f"{text!r} not in {error.allowed!r}"
    # The message a user sees carries all three parts.
    assert field in str(error) and error.allowed in str(error)
