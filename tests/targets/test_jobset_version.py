"""JobSet older than v0.10 drops the failure policy's message patterns silently: readiness reads the served CRD on
every cluster target, and JobSets are created with strict field validation so an API server refuses what it would
prune.

Sources: kubernetes-sigs/jobset #1033 (onJobFailureMessagePatterns, first in v0.10.0); the upstream CRDs v0.9.1,
v0.10.1, v0.12.0 (tests/data/third_party, rehearsal/mtc_local/cluster/crds); xpk `src/xpk/core/cluster.py`
JOBSET_VERSION (v0.8.0 in xpk 1.3-1.8, v0.8.1 in 1.9-1.12, v0.10.1 from 1.13); Kubernetes "API Concepts", Field
validation (fieldValidation=Strict: unknown fields are an error instead of being dropped), which the Kubernetes API
double (tests/doubles/kubernetes.py) implements against the CRD it serves.
"""

from __future__ import annotations

import copy

import pytest
from kubernetes import client as k8s

from mtc_provider.adapters.kubernetes import KubernetesJobSetApi, read_jobset_crd
from mtc_provider.adapters.protocols import ApiError
from mtc_provider.core.definition.render.jobset_crd import jobset_crd_check
from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run
from mtc_provider.core.definition.description.spec import RunConfig

from tests.core.core_helpers import gke_config
from tests.doubles.kubernetes import KubernetesApiDouble, jobset_crd


def _client_factory(server):
    def factory():
        configuration = k8s.Configuration(host=server.url)
        configuration.api_key = {"authorization": "Bearer t"}
        return k8s.ApiClient(configuration)
    return factory


@pytest.fixture(params=["v0.9.1", "v0.10.1", "v0.12.0", None])
def cluster(request):
    server = KubernetesApiDouble(jobset_crd=request.param).start()
    yield request.param, server
    server.stop()


def test_readiness_reads_the_served_crd_and_names_the_version_and_what_is_needed(cluster):
    version, server = cluster
    check = jobset_crd_check(*read_jobset_crd(_client_factory(server)()))
    assert check.name == "jobset_version"
    assert check.ok is (version in ("v0.10.1", "v0.12.0"))
    assert "JobSet v0.10.0 or later" in check.expected and "xpk 1.3-1.8 install v0.8.0" in check.expected
    if version is None:
        assert check.observed.startswith("JobSet not installed") and "jobset/releases" in check.fix
    elif version == "v0.9.1":
        assert "older than v0.10.0" in check.observed and "onJobFailureMessagePatterns" in check.observed


def test_the_installers_version_label_is_named():
    crd = copy.deepcopy(jobset_crd("v0.9.1")[0])
    crd["metadata"]["labels"] = {"app.kubernetes.io/version": "v0.8.1"}  # as a Helm/xpk install labels it
    check = jobset_crd_check(crd)
    assert not check.ok and check.observed.startswith("JobSet v0.8.1: older than v0.10.0")
    assert jobset_crd_check(None, "403 Forbidden").observed.endswith("not readable: 403 Forbidden")


@pytest.mark.parametrize("version", ["v0.9.1", "v0.10.1", "v0.12.0"])
def test_create_is_strict_so_an_old_jobset_refuses_the_field_it_would_drop(version):
    server = KubernetesApiDouble(jobset_crd=version).start()
    try:
        _create_against(version, server)
    finally:
        server.stop()


def _create_against(version, server):
    body = build_jobset_for_run(RunConfig.from_dict(gke_config()))
    api = KubernetesJobSetApi(_client_factory(server), where="test")
    if version == "v0.9.1":
        with pytest.raises(ApiError) as refused:
            api.create("default", body)
        assert refused.value.status == 400
        assert 'unknown field "spec.failurePolicy.rules[0].onJobFailureMessagePatterns"' in str(refused.value)
        assert server.jobsets == {}
        # Without strict validation the same API server stores it silently, without the rule's patterns.
        lax = _client_factory(server)()
        k8s.CustomObjectsApi(lax).create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default",
                                                                  "jobsets", body)
        stored = next(iter(server.jobsets.values()))
        assert all("onJobFailureMessagePatterns" not in rule for rule in stored["spec"]["failurePolicy"]["rules"])
    else:
        created = api.create("default", body)
        assert created["spec"]["failurePolicy"] == body["spec"]["failurePolicy"]
        assert any(r.path.endswith("/jobsets") and r.query.get("fieldValidation") == "Strict"
                   for r in server.requests)
