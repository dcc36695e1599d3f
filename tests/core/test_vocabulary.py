"""The shared vocabulary against its sources: the CRDs kept in the project."""

from __future__ import annotations


import pytest
import yaml

from mtc_provider.core.basics import vocabulary as V
from tests.conftest import reference_file  # the CRDs the local API server ships live in the package



@pytest.mark.parametrize(("resource", "crd_file"), [
    (V.JOBSET, "jobset-crd-v0.12.0.yaml"),
    (V.JOBSET, "jobset-crd-v0.10.1.yaml"),
    (V.CHECKPOINT_CONFIGURATION, "checkpointconfiguration-crd.yaml"),
])
def test_resource_identities_are_the_crds(resource, crd_file):
    crd = next(d for d in yaml.safe_load_all(reference_file(crd_file).read_text())
               if d and d.get("kind") == "CustomResourceDefinition")
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"]) == (
        resource.group, resource.plural, resource.kind)
    assert resource.version in [v["name"] for v in spec["versions"] if v.get("served")]
    assert (spec["scope"] == "Namespaced") == resource.namespaced
    assert crd["metadata"]["name"] == resource.qualified_name
    assert resource.api_version == f"{resource.group}/{resource.version}"


def test_downward_api_env_names_jobsets_own_keys():
    assert dict(V.DOWNWARD_API_ENV)[V.ENV_JOBSET_NAME] == V.JOBSET_NAME_LABEL
    assert all(key.startswith("jobset.sigs.k8s.io/") for _, key in V.DOWNWARD_API_ENV)
