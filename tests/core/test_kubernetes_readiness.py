"""Readiness of a cluster reached through a plain Kubernetes connection, from plain values."""

from mtc_provider.core.definition.cluster.readiness import all_ok, evaluate_kubernetes

BOTH = {"jobsets.jobset.x-k8s.io/v1alpha2": True, "checkpointconfigurations.checkpointing.gke.io/v1": True}
CONFIG = {"metadata": {"name": "c"}, "spec": {"cloudStorageBucketName": "b"}}


def test_both_apis_served_and_the_configuration_present_is_ready():
    checks = evaluate_kubernetes(BOTH, CONFIG, "c")  # no slices given: existence only
    assert all_ok(checks) and checks[-1].observed == "c (bucket b)"


def test_each_missing_piece_fails_its_own_check_with_its_fix():
    no_crd = evaluate_kubernetes({**BOTH, "checkpointconfigurations.checkpointing.gke.io/v1": False})
    assert [(c.name, c.ok) for c in no_crd] == [("jobset_api", True), ("checkpoint_configuration_api", False)]
    assert "HighScaleCheckpointing" in no_crd[1].fix
    absent = evaluate_kubernetes(BOTH, None, "c")
    assert [c.name for c in absent if not c.ok] == ["checkpoint_configuration"]
    assert evaluate_kubernetes({}, None, None)[0].ok is False  # nothing listed: nothing assumed
