"""Bad input is rejected before any side effect, and the error names the field AND what is allowed."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Callable

import pytest
from core_helpers import checkpointing, run_config, slices, workload

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.locations import check_bucket_location, check_bucket_name
from mtc_provider.core.basics.names import check_jobset_name, check_run_name
from mtc_provider.core.definition.shape.sizing import ramdisk_size
from mtc_provider.core.definition.description.spec import BucketSpec, ClusterSpec, RunConfig
from mtc_provider.core.definition.shape.tpu import SliceSpec
from mtc_provider.core.basics.versions import GkeVersion

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
    ("topology-gke-does-not-offer", lambda: SliceSpec("v6e", "1x2", 2, "ct6e-standard-8t"), "slices.topology",
     ("a topology GKE offers for v6e", "2x4 (ct6e-standard-8t, 1 host; ct6e-standard-4t, 2 hosts)")),
    # --- sizing
    ("zero-hosts", lambda: ramdisk_size(70e9, 0), "sizing.hosts_per_slice", ("positive integer",)),
    ("negative-parameters", lambda: ramdisk_size(-1, 32), "sizing.parameters", ("positive",)),
    ("text-parameters", lambda: ramdisk_size("seventy billion", 32), "sizing.parameters", ("70e9",)),
    ("fractional-parameters", lambda: ramdisk_size("1.5", 32), "sizing.parameters", ("whole number",)),
    ("buffer-too-large", lambda: ramdisk_size(70e9, 32, buffer=0.5), "sizing.buffer", ("0.10 and 0.15",)),
    ("zero-bytes-per-param", lambda: ramdisk_size(70e9, 32, bytes_per_parameter=0), "sizing.bytes_per_parameter", ("positive",)),
    # --- versions
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
    ("unknown-target", lambda: run_config(target="aws"), "target.kind", ("gke", "local")),
    ("unknown-key", lambda: run_config(checkpointing={"checkpoint_every": 5}), "checkpointing.checkpoint_every", ("known keys", "checkpoint_period")),
    ("missing-section", lambda: RunConfig.from_dict({"slices": {}, "checkpointing": {}}), "workload", ("a 'workload' section",)),
    ("missing-required-key", lambda: run_config(workload={"jobset_name": None}), "workload.jobset_name", ("required",)),
    ("local-dir-on-gke", lambda: run_config(checkpointing={"base_output_directory": "/data"}), "checkpointing.base_output_directory", ("gs:// URL on the gke target",)),
    ("gke-without-bucket", lambda: RunConfig.from_dict({k: v for k, v in run_config_dict().items() if k != "bucket"}), "bucket", ("a bucket section",)),
    ("cluster-bad-project-number", lambda: ClusterSpec("my-project", "us-central1", "c", project_number="12a"), "cluster.project_number", ("digits",)),
    # --- issue 33 item 14: what Google Cloud, JobSet or Orbax would refuse later, each with its documented rule
    # Cloud Storage "Bucket naming": no "google" (or close misspellings), no IP address in dotted-decimal notation.
    ("google-in-bucket-name", lambda: check_bucket_name("my-google-ckpt"), "bucket.name", ("'google'", "buckets#naming")),
    ("g00gle-in-bucket-name", lambda: check_bucket_name("team-g00gle-ckpt"), "bucket.name", ("'g00gle'",)),
    ("ip-address-bucket-name", lambda: check_bucket_name("192.168.5.4"), "bucket.name", ("IP address", "dotted-decimal")),
    ("bucket-name-part-over-63", lambda: check_bucket_name("a" * 64 + ".b"), "bucket.name", ("each dot-separated part at most 63",)),
    # Cloud Storage "Bucket locations": a listed region, dual-region or multi-region.
    ("no-gcs-location", lambda: BucketSpec("my-bucket", "us-moon1"), "bucket.location", ("Cloud Storage location", "nam4", "storage/docs/locations")),
    # Resource Manager: a project id is 6-30 of [a-z0-9-], starts with a letter, does not end with '-'.
    ("project-number-as-id", lambda: ClusterSpec("123456789012", "us-central1", "c"), "cluster.project_id", ("not the project number",)),
    ("upper-case-project-id", lambda: ClusterSpec("My-Project", "us-central1", "c"), "cluster.project_id", ("6-30 lower-case", "starting with a letter")),
    ("underscore-project-id", lambda: ClusterSpec("my_project", "us-central1", "c"), "cluster.project_id", ("hyphens",)),
    ("project-id-ends-with-hyphen", lambda: ClusterSpec("my-project-", "us-central1", "c"), "cluster.project_id", ("not ending with a hyphen",)),
    ("project-id-too-short", lambda: ClusterSpec("proj", "us-central1", "c"), "cluster.project_id", ("6-30",)),
    # JobSet CRD: failurePolicy.maxRestarts is an int32; the provider's own bound is lower (docs/field-rules.md).
    ("max-restarts-over-int32", lambda: workload(max_restarts=2**31), "workload.max_restarts", ("<= 1000",)),
    # Orbax's emergency CheckpointManager: "at least 2 data-parallel replicas are needed".
    ("emergency-one-replica", lambda: run_config(workload={"extra_flags": {"dcn_data_parallelism": 1, "dcn_fsdp_parallelism": 2}}),
     "workload.extra_flags.dcn_data_parallelism", ("at least 2 data-parallel replicas", "gives 1")),
    ("emergency-fsdp-takes-the-slices", lambda: run_config(workload={"extra_flags": {"dcn_fsdp_parallelism": 2}}),
     "workload.extra_flags.dcn_data_parallelism", ("at least 2 data-parallel replicas",)),
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


# --- refused by `mtc plan` and by the sample DAGs' plan task (issue 12) ---------------------------------------------
# Each case goes through the real entry points a user meets: the `mtc plan` command on a YAML run description,
# and the `plan` task of the sample DAG (its python callable, with the form's defaults plus the change, and the
# change sent as dag_run.conf). Both must refuse before any side effect, naming field, value and what is allowed.

def _dash(**sections: Any) -> dict:
    from core_helpers import gke_config

    return gke_config(**sections)


def _local(**sections: Any) -> dict:
    from core_helpers import local_config

    return local_config(**sections)


# (case id, run description, field, substrings of "allowed", the value as the error must show it)
PLAN_CASES: list[tuple[str, dict, str, tuple[str, ...], str]] = [
    ("command-as-string", _dash(workload={"command": "python3 -m MaxText.train"}), "workload.command",
     ("no shell string",), "'python3 -m MaxText.train'"),
    ("ramdisk-dotdot-into-etc", _dash(checkpointing={"local_checkpoint_directory": "/dev/shm/../etc"}),
     "checkpointing.local_checkpoint_directory", ("not a system location", "under /bin, /boot, /dev"), "'/dev/etc'"),
    ("ramdisk-double-slash-etc", _dash(checkpointing={"local_checkpoint_directory": "//etc"}),
     "checkpointing.local_checkpoint_directory", ("not a system location",), "'/etc'"),
    ("ramdisk-usr-local", _dash(checkpointing={"local_checkpoint_directory": "/usr/local"}),
     "checkpointing.local_checkpoint_directory", ("under /bin", "/usr"), "'/usr/local'"),
    ("ramdisk-etc-mtc", _dash(checkpointing={"local_checkpoint_directory": "/etc/mtc"}),
     "checkpointing.local_checkpoint_directory", ("/etc",), "'/etc/mtc'"),
    ("ramdisk-under-proc", _dash(checkpointing={"local_checkpoint_directory": "/proc/1/root"}),
     "checkpointing.local_checkpoint_directory", ("/proc",), "'/proc/1/root'"),
    ("ramdisk-under-sys", _dash(checkpointing={"local_checkpoint_directory": "/sys/fs/x"}),
     "checkpointing.local_checkpoint_directory", ("/sys",), "'/sys/fs/x'"),
    ("ramdisk-under-bin", _dash(checkpointing={"local_checkpoint_directory": "/bin/x"}),
     "checkpointing.local_checkpoint_directory", ("/bin",), "'/bin/x'"),
    ("ramdisk-under-lib", _dash(checkpointing={"local_checkpoint_directory": "/lib/x/../y"}),
     "checkpointing.local_checkpoint_directory", ("/lib",), "'/lib/y'"),
    ("ramdisk-under-var-lib", _dash(checkpointing={"local_checkpoint_directory": "/var/lib/kubelet"}),
     "checkpointing.local_checkpoint_directory", ("/var/lib",), "'/var/lib/kubelet'"),
    ("ramdisk-with-a-space", _dash(checkpointing={"local_checkpoint_directory": "/my ramdisk"}),
     "checkpointing.local_checkpoint_directory", ("letters, digits",), "'/my ramdisk'"),
    ("output-inside-ramdisk", _local(checkpointing={"base_output_directory": "/local/out"}),
     "checkpointing.base_output_directory", ("outside local_checkpoint_directory (/local)",), "'/local/out'"),
    ("output-not-normalized", _local(checkpointing={"base_output_directory": "/srv/mtc/../../etc/out"}),
     "checkpointing.base_output_directory", ("normalized absolute path", "/etc/out"), "'/srv/mtc/../../etc/out'"),
    ("model-larger-than-host-memory", _dash(sizing={"parameters": "1e30"}), "sizing.parameters",
     ("fits the 720 GiB host memory of ct6e-standard-4t", "more hosts per slice"),
     "1000000000000000000000000000000"),
    ("single-host-8t-on-multi-host-topology", _dash(slices={"topology": "4x4", "machine_type": "ct6e-standard-8t"}),
     "slices.machine_type", ("multi-host machine type: ct6e-standard-4t", "single host of 8 chips"),
     "'ct6e-standard-8t'"),
    ("single-host-1t-on-multi-host-topology",
     _dash(slices={"tpu_type": "v5e", "topology": "2x2", "machine_type": "ct5lp-hightpu-1t"}),
     "slices.machine_type", ("ct5lp-hightpu-4t",), "'ct5lp-hightpu-1t'"),
    ("bad-checkpoint-configuration-name", _dash(checkpoint_configuration_name="MTC_Config"),
     "checkpoint_configuration.name", ("lower-case",), "'MTC_Config'"),
    ("bad-service-account", _dash(workload={"service_account": "Trainer_SA"}), "workload.service_account",
     ("lower-case",), "'Trainer_SA'"),
    ("local-image-placeholder-on-gke", _dash(workload={"image": "local"}), "workload.image",
     ("not the local placeholder",), "'local'"),
    ("image-with-a-space", _dash(workload={"image": "my image"}), "workload.image", ("container image",),
     "'my image'"),
    ("model-flag-overrides-checkpointing", _dash(workload={"extra_flags": {"checkpoint_period": 5}}),
     "workload.extra_flags.checkpoint_period", ("set it in the checkpointing section",), "5"),
    ("model-flag-bad-key", _dash(workload={"extra_flags": {"model name": "x"}}), "workload.extra_flags.model name",
     ("MaxText config key",), "'model name'"),
    ("author-key-in-run-description", _dash(workload={"gcp_conn_id": "prod"}), "workload.gcp_conn_id",
     ("known keys",), "'prod'"),
    ("buffer-outside-range-without-override", _dash(sizing={"parameters": "70e9", "buffer": 0.3}), "sizing.buffer",
     ("0.10 and 0.15", "allow_any_buffer"), "0.3"),
    ("local-bucket-escaping", {**_local(), "bucket": {"name": "../..", "location": "us-central1"}}, "bucket.name",
     ("lower-case letters",), "'../..'"),
    # Issue #24: shapes GKE cannot create, single-host Multislice on gke, names JobSet's webhook refuses.
    ("single-host-multislice-on-gke", _dash(slices={"topology": "2x2"}), "slices.topology",
     ("Multislice only supports multi-host TPU slice node pools", "2x4 (ct6e-standard-4t, 2 hosts)"), "'2x2'"),
    ("v6e-topology-gke-does-not-offer", _dash(slices={"topology": "2x6"}), "slices.topology",
     ("a topology GKE offers for v6e", "4x8 (ct6e-standard-4t, 8 hosts)", "16x16"), "'2x6'"),
    ("v6e-topology-beyond-the-pod", _dash(slices={"topology": "16x32"}), "slices.topology",
     ("a topology GKE offers for v6e",), "'16x32'"),
    ("v5p-topology-gke-does-not-offer", _dash(slices={"tpu_type": "v5p", "topology": "2x2x3"}), "slices.topology",
     ("a topology GKE offers for v5p", "2x2x2 (ct5p-hightpu-4t, 2 hosts)", "multiple of 4", "6144 chips"),
     "'2x2x3'"),
    ("jobset-name-starting-with-a-digit", _dash(workload={"jobset_name": "1run"}), "workload.jobset_name",
     ("starting with a lower-case letter", "DNS-1035"), "'1run'"),
    ("pod-names-over-63-characters",
     _dash(slices={"topology": "8x16"}, workload={"jobset_name": "a" * 40, "replicated_job_name": "b" * 15}),
     "workload.jobset_name", ("at most 25 characters", "-1-31-abcde, is 67 characters", "allows 63"), repr("a" * 40)),
]


@pytest.mark.parametrize("config, field, allowed, shown", [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES])
def test_mtc_plan_refuses(tmp_path, config, field, allowed, shown) -> None:
    import yaml
    from typer.testing import CliRunner

    from mtc_provider.cli.app import app

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""  # nothing planned, nothing rendered
    error = " ".join(result.stderr.split())
    assert f"error: {field}: {shown} is not allowed; allowed: " in error, error
    for text in allowed:
        assert text in error, f"{text!r} not in {error!r}"
    assert "/dev/shm/../etc" not in error  # the normalized path is shown, never the raw one


def test_buffer_override_is_explicit_in_the_sizing_spec_and_the_cli(tmp_path) -> None:
    import yaml
    from typer.testing import CliRunner

    from mtc_provider.cli.app import app
    from mtc_provider.core.definition.description.plan import build_plan
    from mtc_provider.core.definition.description.spec import RunConfig

    plan = build_plan(RunConfig.from_dict(_dash(sizing={"parameters": "70e9", "buffer": 0.3,
                                                        "allow_any_buffer": True})))
    assert plan.ramdisk.buffer == Decimal("0.3") and plan.lines()["ramdisk"][3].startswith("With a 30% buffer")
    size = CliRunner().invoke(app, ["size", "--params", "70e9", "--hosts", "32", "--buffer", "0.3",
                                    "--allow-any-buffer"])
    assert size.exit_code == 0 and "x 1.3 = 68.25 GB" in size.stdout
    refused = CliRunner().invoke(app, ["size", "--params", "70e9", "--hosts", "32", "--buffer", "0.3"])
    assert refused.exit_code == 2 and "--allow-any-buffer" in refused.stderr
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(_dash(sizing={"allow_any_buffer": "yes"})))
    bad = CliRunner().invoke(app, ["plan", str(path)])
    assert bad.exit_code == 2 and "sizing.allow_any_buffer" in bad.stderr


def test_a_ramdisk_taking_most_of_the_host_memory_warns(tmp_path) -> None:
    import yaml
    from typer.testing import CliRunner

    from mtc_provider.cli.app import app

    # Two hosts per slice (2x4 on ct6e-standard-4t): 20e9 parameters need 258Gi per host, 36% of 720 GiB (no
    # warning); 40e9 need 515Gi, 72%.
    quiet, loud = (_dash(slices={"topology": "2x4"}, sizing={"parameters": p}) for p in ("20e9", "40e9"))
    for config, warned in ((quiet, False), (loud, True)):
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(config))
        result = CliRunner().invoke(app, ["plan", str(path)])
        assert result.exit_code == 0, result.output
        assert ("takes 72% of the 720 GiB host memory of ct6e-standard-4t" in result.stdout) is warned, result.stdout


def test_the_ramdisk_path_is_rendered_normalized() -> None:
    from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run, pod_template
    from mtc_provider.core.definition.description.spec import RunConfig

    config = RunConfig.from_dict(_dash(checkpointing={"local_checkpoint_directory": "/local/./ram//disk/"}))
    container = pod_template(build_jobset_for_run(config))["spec"]["containers"][0]
    assert container["volumeMounts"][0]["mountPath"] == "/local/ram/disk"
    assert "local_checkpoint_directory=/local/ram/disk" in container["args"]


def test_user_values_in_args_cannot_expand_kubernetes_variables() -> None:
    """Kubernetes expands $(VAR) in command and args and reduces $$ to $ (kubernetes.io, "Define a Command and
    Arguments for a Container"; facts.md): doubled, a user's value reaches the program as written."""
    from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run, pod_template
    from mtc_provider.core.definition.description.spec import RunConfig
    from mtc_local.runner.manifest import expand_vars

    value = "$(GOOGLE_APPLICATION_CREDENTIALS)-and-$$-and-$HOME"
    config = RunConfig.from_dict(_dash(workload={"extra_flags": {"tokenizer_path": value}}))
    args = pod_template(build_jobset_for_run(config))["spec"]["containers"][0]["args"]
    assert "tokenizer_path=$$(GOOGLE_APPLICATION_CREDENTIALS)-and-$$$$-and-$$HOME" in args
    # What the container sees after Kubernetes' expansion (the local runner implements the same rules).
    expanded = [expand_vars(arg, {"GOOGLE_APPLICATION_CREDENTIALS": "/secret/key.json", "HOME": "/root"})
                for arg in args]
    assert f"tokenizer_path={value}" in expanded


# The same refusals through the sample DAGs' trigger form: the plan task, the DAG's first task, is called as the
# task runner calls it (params = the form's defaults with the change; dag_run.conf = the change).
GKE_FORM = {"target": "gke", "cluster": {"project_id": "my-project", "location": "us-central1", "name": "c"},
            "workload": {"image": "us-docker.pkg.dev/p/r/maxtext:1"}}
GKE_WORKLOAD = GKE_FORM["workload"]


def _cp(**fields):
    return {"checkpointing": fields}


# (case id, DAG, change sent by the trigger, field, substrings of "allowed"). The training DAG's form has the run
# description's sections (core.definition.description.run): the same fields and errors as `mtc plan FILE` (tests/core/test_one_description.py).
DAG_CASES: list[tuple[str, str, dict, str, tuple[str, ...]]] = [
    ("conf-command", "training", {"command": "rm -rf /"}, "dag_run.conf.command", ("one of the DAG's params",)),
    ("conf-connection", "training", {"gcp_conn_id": "prod_admin"}, "dag_run.conf.gcp_conn_id", ("params",)),
    ("conf-service-account", "training", {"service_account": "admin"}, "dag_run.conf.service_account", ("params",)),
    ("workload-service-account", "training", {"workload": {"service_account": "admin"}},
     "workload.service_account", ("the DAG author sets it",)),
    ("workload-command-on-gke", "training", {**GKE_FORM, "workload": {**GKE_WORKLOAD, "command": ["rm", "-rf", "/"]}},
     "workload.command", ("the DAG author's",)),
    ("ramdisk-dotdot-into-etc", "training", _cp(local_checkpoint_directory="/dev/shm/../etc"),
     "checkpointing.local_checkpoint_directory", ("not a system location",)),
    ("ramdisk-double-slash-etc", "training", _cp(local_checkpoint_directory="//etc"),
     "checkpointing.local_checkpoint_directory", ("not a system location",)),
    ("ramdisk-usr-local", "training", _cp(local_checkpoint_directory="/usr/local"),
     "checkpointing.local_checkpoint_directory", ("/usr",)),
    ("ramdisk-etc-mtc", "training", _cp(local_checkpoint_directory="/etc/mtc"),
     "checkpointing.local_checkpoint_directory", ("/etc",)),
    ("ramdisk-var-lib", "training", _cp(local_checkpoint_directory="/var/lib/mtc"),
     "checkpointing.local_checkpoint_directory", ("/var/lib",)),
    ("output-inside-ramdisk", "training", _cp(local_checkpoint_directory="<HOME_PARENT>"),
     "checkpointing.base_output_directory", ("outside local_checkpoint_directory",)),
    ("model-larger-than-host-memory", "training", {"sizing": {"parameters": 1e30}}, "sizing.parameters",
     ("fits the 720 GiB host memory of ct6e-standard-4t",)),
    ("single-host-8t-on-multi-host-topology", "training",
     {"slices": {"machine_type": "ct6e-standard-8t", "topology": "4x4"}}, "slices.machine_type", ("ct6e-standard-4t",)),
    ("local-image-placeholder-on-gke", "training", {**GKE_FORM, "workload": {"image": "local"}}, "workload.image",
     ("not the local placeholder",)),
    ("model-flag-overrides-checkpointing", "training",
     {**GKE_FORM, "workload": {**GKE_WORKLOAD, "extra_flags": {"checkpoint_period": 5}}},
     "workload.extra_flags.checkpoint_period", ("set it in the checkpointing section",)),
    ("model-flag-bad-key", "training", {**GKE_FORM, "workload": {**GKE_WORKLOAD, "extra_flags": {"model name": "x"}}},
     "workload.extra_flags.model name", ("MaxText config key",)),
    ("model-flag-not-a-scalar", "training",
     {**GKE_FORM, "workload": {**GKE_WORKLOAD, "extra_flags": {"ici_mesh": [1, 2]}}},
     "workload.extra_flags.ici_mesh", ("a string, integer, float or true/false",)),
    ("model-flag-unknown-locally", "training", {"workload": {"extra_flags": {"model_name": "llama2-7b"}}},
     "workload.extra_flags.model_name", ("model_dim",)),
    ("fault-on-a-missing-slice", "training", {"fault_plan": [{"kind": "sigterm_slice", "at_step": 5, "slice": 2}]},
     "fault_plan[0].slice", ("from 0 to 1",)),
    ("fault-on-a-missing-host", "training", {"fault_plan": [{"kind": "sigkill_host", "at_step": 5, "slice": 0,
                                                               "host": 1}]},
     "fault_plan[0].host", ("from 0 to 0", "1 hosts per slice")),
    ("fault-beyond-the-target", "training", {"fault_plan": [{"kind": "sigkill_host", "at_step": 500}]},
     "fault_plan[0].at_step", ("below steps (70",)),
    ("poll-interval-below-one-second", "training", {"poll_interval": 0.2}, "poll_interval", (">= 1",)),
    ("local-bucket-escaping-the-home", "training", {"bucket": {"name": "../.."}}, "bucket.name",
     ("lower-case letters",)),
    ("setup-bad-checkpoint-configuration-name", "setup", {"checkpoint_configuration_name": "MTC_Config"},
     "checkpoint_configuration.name", ("lower-case",)),
    ("setup-conf-service-account", "setup", {"service_account": "admin"}, "dag_run.conf.service_account",
     ("params",)),  # the DAG author's WORKLOAD_KSA, as in the training DAG
    ("setup-bad-namespace", "setup", {"workload": {"namespace": "ml_team"}}, "workload.namespace", ("lower-case",)),
    ("setup-bad-node-pool-prefix", "setup", {"node_pool_prefix": "Pools_"}, "node_pool_prefix",
     ("lower-case", "36")),
    ("setup-zone-as-bucket-location", "setup", {"bucket": {"location": "us-central1-a"}}, "bucket.location",
     ("region us-central1",)),
    # The setup form is in the run description's sections too: a flat field of the old form is refused naming it.
    ("setup-flat-conf-is-refused", "setup", {"bucket_location": "us-central1"}, "dag_run.conf.bucket_location",
     ("one of the DAG's params", "bucket, checkpoint_configuration_name, checkpointing, cluster")),
    ("setup-switch-not-a-boolean", "setup", {"create_node_pools": "yes"}, "create_node_pools", ("true or false",)),
    ("setup-conf-connection", "setup", {"gcp_conn_id": "prod_admin"}, "dag_run.conf.gcp_conn_id", ("params",)),
    ("single-host-multislice-on-gke", "training", {**GKE_FORM, "slices": {"topology": "2x2"}}, "slices.topology",
     ("Multislice only supports multi-host TPU slice node pools", "the smallest is 2x4 on ct6e-standard-4t")),
    ("setup-single-host-multislice-on-gke", "setup",
     {"target": "gke", "cluster": {"project_id": "my-project", "location": "us-central1", "name": "c"},
      "slices": {"topology": "2x2"}},
     "slices.topology",
     ("multi-host",)),
    ("setup-topology-gke-does-not-offer", "setup", {"slices": {"topology": "2x6"}}, "slices.topology",
     ("a topology GKE offers for v6e",)),
    ("run-name-starting-with-a-digit", "training", _cp(run_name="1run"), "checkpointing.run_name",
     ("starting with a lower-case letter",)),
    # The field rules (tests/core/test_field_rules.py) through the forms: GKE node pool names, Kubernetes tolerations.
    ("setup-node-pool-prefix-leading-digit", "setup", {"node_pool_prefix": "1pool"}, "node_pool_prefix",
     ("starting with a letter",)),
    ("toleration-seconds-on-noschedule", "training",
     {**GKE_FORM, "customization": {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule",
                                                     "tolerationSeconds": 30}]}},
     "customization.tolerations[0].effect", ("NoExecute when tolerationSeconds is set",)),
    ("raw-spot-selector", "training", {**GKE_FORM, "customization": {"node_selector": {"cloud.google.com/gke-spot": "true"}}},
     "customization.node_selector.cloud.google.com/gke-spot", ("capacity: spot",)),
]
DAG_FILES = {"training": "mtc_resilient_training.py", "setup": "mtc_cluster_setup.py"}


@pytest.fixture(scope="module")
def sample_dags():
    import importlib.util
    from pathlib import Path

    dags = {}
    for key, name in DAG_FILES.items():
        path = Path(__file__).resolve().parents[2] / "dags" / name
        spec = importlib.util.spec_from_file_location(f"bad_input_{key}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        dags[key] = module.dag
    return dags


def run_plan_task(dag, change: dict) -> dict:
    from types import SimpleNamespace

    params = {key: dag.params[key] for key in dag.params} | change
    return dag.get_task("plan").python_callable(params=params, dag_run=SimpleNamespace(conf=change))


@pytest.mark.parametrize("dag_key, change, field, allowed", [c[1:] for c in DAG_CASES], ids=[c[0] for c in DAG_CASES])
def test_sample_dag_plan_refuses(sample_dags, tmp_path, monkeypatch, dag_key, change, field, allowed) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    home = tmp_path / "mtc-home" / "local"
    monkeypatch.setenv("MTC_LOCAL_HOME", str(home))
    change = {k: ({**v, "local_checkpoint_directory": str(home.parent)} if isinstance(v, dict)
                  and v.get("local_checkpoint_directory") == "<HOME_PARENT>" else v) for k, v in change.items()}
    with pytest.raises(AirflowFailException) as caught:
        run_plan_task(sample_dags[dag_key], change)
    message = str(caught.value)
    assert message.startswith(f"invalid run description: {field}: "), message
    assert " is not allowed; allowed: " in message
    for text in allowed:
        assert text in message, f"{text!r} not in {message!r}"
    assert not (tmp_path / "mtc-home").exists()  # no side effect: not even the local home was made


def test_sample_dag_forms_pass_with_their_defaults(sample_dags, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MTC_LOCAL_HOME", str(tmp_path / "home"))
    run = run_plan_task(sample_dags["training"], {"workload": {"extra_flags": {"model_dim": 64}}})
    assert run["workload"]["extra_flags"]["model_dim"] == 64 and run["poll_interval"] == 2.0
    gke = run_plan_task(sample_dags["training"],
                        {**GKE_FORM, "workload": {**GKE_WORKLOAD, "extra_flags": {"model_name": "llama2-7b"}}})
    assert gke["workload"]["image"] == GKE_WORKLOAD["image"] and gke["target"]["gcp_conn_id"] == "google_cloud_default"
    assert gke["workload"]["extra_flags"] == {"model_name": "llama2-7b"}
    setup = run_plan_task(sample_dags["setup"], {})
    assert (setup["checkpoint_configuration_name"], setup["node_pool_prefix"]) == ("mtc-checkpoint-config", "mtc-slice")


@pytest.mark.parametrize("value, low, parsed", [(3, 0, 3), (" 4 ", 1, 4), (0, 0, 0), (0, 1, None), (True, 0, None),
                                                (2.5, 0, None), ("-1", 0, None), (None, 0, None)])
def test_the_integer_field_parser_takes_text_digits_and_refuses_bools(value, low, parsed) -> None:
    from mtc_provider.core.basics.errors import SpecError, integer

    if parsed is None:
        with pytest.raises(SpecError, match=r"^n: .* is not allowed; allowed: an integer$"):
            integer("n", value, "an integer", low)
    else:
        assert integer("n", value, "an integer", low) == parsed


@pytest.mark.parametrize("value, low, strict, parsed", [
    (1.5, None, False, 1.5), ("2", 0, True, 2.0), (-3, None, False, -3.0), (0, 0, False, 0.0), (0, 0, True, None),
    (-1, 0, False, None), (float("nan"), None, False, None), (float("-inf"), None, False, None),
    ("inf", None, False, None), (False, None, False, None), ("x", None, False, None)])
def test_the_number_field_parser_refuses_bools_nan_and_infinities(value, low, strict, parsed) -> None:
    from mtc_provider.core.basics.errors import SpecError, finite_number

    if parsed is None:
        with pytest.raises(SpecError, match=r"^s: .* is not allowed; allowed: seconds$"):
            finite_number("s", value, "seconds", low, strict)
    else:
        assert finite_number("s", value, "seconds", low, strict) == parsed
