from __future__ import annotations

import pytest

from mtc_provider.core.definition.cluster.iam import BUCKET_ROLE, bucket_members, workload_identity_pool
from mtc_local.cluster.selectors import label_matcher  # the one matcher: the local API server's
from mtc_provider.core.basics.labels import DAG_ID, MANAGED_BY, RUN_ID, run_labels, selector
from mtc_provider.core.definition.description.locations import check_bucket_location, check_bucket_name
from mtc_provider.core.basics.names import LABEL_VALUE_RE, check_dns1123_label, check_jobset_name, label_value


@pytest.mark.parametrize("name", ["a", "run-1", "x" * 40, "0abc"])
def test_valid_jobset_names(name) -> None:
    assert check_jobset_name(name) == name


def test_dns1123_label_length_limit() -> None:
    assert check_dns1123_label("f", "a" * 63) == "a" * 63


@pytest.mark.parametrize(
    "text",
    ["manual__2026-11-03T10:00:00+00:00", "scheduled__2026-01-01T00:00:00.123456+00:00", "__", "x" * 100, "Ünïcode run"],
)
def test_label_value_is_always_valid_and_stable(text) -> None:
    value = label_value(text)
    assert LABEL_VALUE_RE.match(value) and 0 < len(value) <= 63
    assert label_value(text) == value


@pytest.mark.parametrize(
    "location, normalized", [("us-central1", "us-central1"), ("US", "us"), ("europe-west4", "europe-west4"), ("nam4", "nam4")]
)
def test_bucket_locations(location, normalized) -> None:
    assert check_bucket_location(location) == normalized


@pytest.mark.parametrize("name", ["my-checkpoints", "a.b_c-1", "abc"])
def test_bucket_names(name) -> None:
    assert check_bucket_name(name) == name


def test_bucket_members_are_the_guides_two_principals() -> None:
    members = bucket_members("my-project", "123456789012", "training", "maxtext")
    assert members == [
        "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/"
        "my-project.svc.id.goog/subject/ns/gke-managed-checkpointing/sa/gke-checkpointing-multitier-node",
        "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/"
        "my-project.svc.id.goog/subject/ns/training/sa/maxtext",
    ]
    assert BUCKET_ROLE == "roles/storage.objectUser"
    assert workload_identity_pool("p") == "p.svc.id.goog"


def test_run_labels_and_selector() -> None:
    labels = run_labels("train_dag", "manual__2026-11-03T10:00:00+00:00", "launch", "run-1")
    assert labels[DAG_ID] == "train_dag"
    assert LABEL_VALUE_RE.match(labels[RUN_ID])
    assert labels[MANAGED_BY] == "airflow-provider-mtc"
    assert selector({"b": "2", "a": "1"}) == "a=1,b=2"


@pytest.mark.parametrize(("selector_text", "matches"), [
    ("", True),
    ("a=1", True), ("a==1", True), ("a=2", False), ("c=1", False),
    ("a!=2", True), ("a!=1", False), ("c!=1", True),  # != also matches objects without the key
    ("b", True), ("c", False),
    ("a=1,b=2", True), ("a=1, b=3", False),
])
def test_selector_matches_equality_based_requirements(selector_text: str, matches: bool) -> None:
    assert label_matcher(selector_text)({"a": "1", "b": "2"}) is matches


def test_selector_matches_what_selector_builds() -> None:
    labels = run_labels("dag", "run", "task", "name")
    assert label_matcher(selector(labels))(labels)
    assert not label_matcher(selector(labels))({**labels, RUN_ID: "other"})


# Kubernetes "Object Names and IDs": a ServiceAccount's and a custom resource's name is a DNS subdomain (RFC 1123):
# '.'-joined labels of lower-case letters, digits and '-', at most 253 characters (issue 33 item 15).
@pytest.mark.parametrize("name", ["mtc.workload", "a.b.c", "team-a.trainer-1", "a" * 63 + "." + "b" * 63, "x" * 253])
def test_service_account_and_checkpoint_configuration_names_are_dns_subdomains(name) -> None:
    from mtc_provider.core.basics.names import check_checkpoint_configuration_name, check_service_account

    assert check_service_account(name) == name
    assert check_checkpoint_configuration_name(name) == name


@pytest.mark.parametrize("name, allowed", [("a..b", "each '.'-separated part"), (".a", "starting and ending"),
                                           ("a.", "starting and ending"), ("A.b", "lower-case"),
                                           ("a_b.c", "lower-case"), ("x" * 254, "at most 253")])
def test_names_that_are_no_dns_subdomain_are_refused_naming_the_rule(name, allowed) -> None:
    from mtc_provider.core.basics.errors import SpecError
    from mtc_provider.core.basics.names import check_checkpoint_configuration_name, check_service_account

    for check, field in ((check_service_account, "workload.service_account"),
                         (check_checkpoint_configuration_name, "checkpoint_configuration.name")):
        with pytest.raises(SpecError) as caught:
            check(name)
        assert field in str(caught.value) and allowed in str(caught.value)


def test_dotted_names_pass_the_whole_run_description() -> None:
    from core_helpers import run_config

    config = run_config(workload={"service_account": "trainer.team-a"}, checkpoint_configuration_name="mtc.v1")
    assert (config.workload.service_account, config.checkpoint_configuration_name) == ("trainer.team-a", "mtc.v1")
