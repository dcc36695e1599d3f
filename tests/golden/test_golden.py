"""Golden manifests: rendered exactly, and valid for JobSet v0.10.1 / v0.12.0, Kubernetes and the MTC CRD."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from mtc_provider.cli.app import app
from mtc_provider.core.definition.render.jobset_manifest import FAIL_ON_BUG_RULE, pod_template

sys.path.insert(0, str(Path(__file__).resolve().parent))
import regenerate  # noqa: E402

CASES = sorted(regenerate.CASES)
# Kubernetes versions GKE runs MTC on (the guide: later than 1.32.3-gke.1170000).
KUBERNETES_VERSIONS = ("1.32.0", "1.34.0")
# JobSet's webhook rejects failure-policy rule names that do not match this.
RULE_NAME_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


def golden_documents(name: str) -> list[dict]:
    return list(yaml.safe_load_all((regenerate.GOLDEN / name).read_text()))


def split(name: str) -> tuple[dict, dict]:
    docs = {doc["kind"]: doc for doc in golden_documents(name)}
    assert sorted(docs) == ["CheckpointConfiguration", "JobSet"]
    return docs["JobSet"], docs["CheckpointConfiguration"]


@pytest.mark.parametrize("name", CASES)
def test_golden_file_matches_render_exactly(name: str) -> None:
    assert regenerate.render(regenerate.CASES[name]) == (regenerate.GOLDEN / name).read_text()


@pytest.mark.parametrize("name", CASES)
def test_cli_render_prints_the_golden_stream(name: str) -> None:
    result = CliRunner().invoke(app, ["render", str(regenerate.REPO / regenerate.CASES[name])])
    assert result.exit_code == 0, result.output
    assert result.stdout == (regenerate.GOLDEN / name).read_text()


@pytest.mark.parametrize("name", CASES)
def test_checkpoint_configuration_comes_before_the_jobset(name: str) -> None:
    assert [doc["kind"] for doc in golden_documents(name)] == ["CheckpointConfiguration", "JobSet"]


@pytest.mark.parametrize("crd", ["jobset-crd-v0.10.1.yaml", "jobset-crd-v0.12.0.yaml"])
@pytest.mark.parametrize("name", CASES)
def test_jobset_is_valid_for_the_crd(name: str, crd: str, jobset_validators: dict) -> None:
    jobset, _ = split(name)
    jobset_validators[crd].validate(jobset)
    for rule in jobset["spec"]["failurePolicy"]["rules"]:
        assert RULE_NAME_RE.match(rule["name"]), rule["name"]


def test_strict_schema_rejects_an_unknown_field(jobset_validators: dict, checkpoint_configuration_validator) -> None:
    """The validation above can fail: a misspelt field is caught, not pruned."""
    jobset, config = split("gke-v6e.yaml")
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelizm"] = 8
    with pytest.raises(jsonschema.ValidationError, match="parallelizm"):
        jobset_validators["jobset-crd-v0.10.1.yaml"].validate(jobset)
    config["spec"]["mountOptions"] = ["implicit-dirs"]
    with pytest.raises(jsonschema.ValidationError, match="mountOptions"):
        checkpoint_configuration_validator.validate(config)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", CASES)
def test_pod_template_is_a_valid_pod(name: str, version: str) -> None:
    jobset, _ = split(name)
    template = pod_template(jobset)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{jobset['metadata']['name']}-slice-0-0", **template["metadata"]},
        "spec": template["spec"],
    }
    kubernetes_validate.validate(pod, version, strict=True)


def test_kubernetes_validation_can_fail() -> None:
    jobset, _ = split("gke-v6e.yaml")
    template = pod_template(jobset)
    spec = dict(template["spec"], restartPolicy=7)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": spec}, "1.32.0", strict=True)


@pytest.mark.parametrize("name", CASES)
def test_checkpoint_configuration_is_valid_for_the_crd(name: str, checkpoint_configuration_validator) -> None:
    _, config = split(name)
    checkpoint_configuration_validator.validate(config)
    assert "mountOptions" not in config["spec"]
    assert "namespace" not in config["metadata"]  # cluster-scoped


@pytest.mark.parametrize(
    "name, replicas, hosts, accelerator, topology, chips, grace",
    [
        ("gke-v6e.yaml", 2, 8, "tpu-v6e-slice", "4x8", 4, 300),
        ("gke-v5p.yaml", 4, 2, "tpu-v5p-slice", "2x2x2", 4, 300),
        ("gke-v5e-grace.yaml", 2, 4, "tpu-v5-lite-podslice", "4x4", 4, 900),
    ],
)
def test_golden_shapes(name, replicas, hosts, accelerator, topology, chips, grace) -> None:
    jobset, _ = split(name)
    job = jobset["spec"]["replicatedJobs"][0]
    pod = job["template"]["spec"]["template"]["spec"]
    assert (job["replicas"], job["template"]["spec"]["parallelism"], job["template"]["spec"]["completions"]) == (
        replicas,
        hosts,
        hosts,
    )
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": accelerator,
        "cloud.google.com/gke-tpu-topology": topology,
    }
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": chips}
    assert pod["terminationGracePeriodSeconds"] == grace
    assert [r["name"] for r in jobset["spec"]["failurePolicy"]["rules"]] == ["RestartOnDisruption", FAIL_ON_BUG_RULE]
    assert "mountOptions" not in (regenerate.GOLDEN / name).read_text()
