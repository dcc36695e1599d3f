"""A failed token mint is an identity outage or a refusal, never an attempt failure (issue #33 item 4).

google.auth raises RefreshError with the identity service's answer in its text when IAM Credentials refuses or
fails an impersonation (google/auth/impersonated_credentials.py `_make_iam_token_request`: "Unable to acquire
impersonated credentials" and the response body), when the metadata server fails Workload Identity
(google/auth/compute_engine/_metadata.py: "... Status: 500 ..."), and TransportError when no answer came at all.
The exceptions here are google.auth's own classes with those texts.

An outage is Retryable, so the watch and every request wait it out within the same outage budget as a Kubernetes API
outage (no retry spent); a refusal is a 403 (Forbidden: the task fails at once for good, nothing deleted).
"""

from __future__ import annotations

import pytest
from google.auth import exceptions as gae

from mtc_provider.adapters import kubernetes as k8s
from mtc_provider.adapters import retry

IAM_503 = ('Unable to acquire impersonated credentials', '{\n  "error": {\n    "code": 503,\n    "message": '
           '"The service is currently unavailable.",\n    "status": "UNAVAILABLE"\n  }\n}\n')
IAM_403 = ('Unable to acquire impersonated credentials', '{\n  "error": {\n    "code": 403,\n    "message": '
           '"Permission \'iam.serviceAccounts.getAccessToken\' denied on resource (or it may not exist).",\n'
           '    "status": "PERMISSION_DENIED"\n  }\n}\n')
METADATA_500 = ("Failed to retrieve http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/"
                "default/token from the Google Compute Engine metadata service. Status: 500 Response:\nb'oops'")


@pytest.mark.parametrize("exc, kind, status", [
    (gae.RefreshError(*IAM_503), retry.Retryable, 503),
    (gae.RefreshError(METADATA_500), retry.Retryable, 500),
    (gae.TransportError("HTTPSConnectionPool(host='sts.googleapis.com'): Read timed out."), retry.Retryable, 0),
    (gae.RefreshError("unknown", retryable=True), retry.Retryable, 0),
    (gae.RefreshError(*IAM_403), retry.PermissionDenied, 403),
    (gae.RefreshError("invalid_grant: Invalid JWT Signature."), retry.PermissionDenied, 403),
], ids=["iam-503", "metadata-500", "sts-transport", "flagged-retryable", "iam-403", "invalid-grant"])
def test_token_mint_failures_map_to_outage_or_refusal(exc, kind, status):
    mapped = retry.map_error(exc)
    assert isinstance(mapped, kind) and mapped.status == status, mapped
    assert "token" in str(mapped)


def test_a_refused_token_is_a_forbidden_that_names_the_token_not_a_kubernetes_verb():
    with pytest.raises(k8s.Forbidden) as caught:
        with k8s.mapped_errors(k8s.OPEN_CLIENT, "ml", "connection google_cloud_default"):
            raise gae.RefreshError(*IAM_403)
    text = str(caught.value)
    assert "may not mint a token to reach the Kubernetes API" in text
    assert "iam.serviceAccounts.getAccessToken" in text


def test_a_sync_request_waits_out_an_identity_outage_and_then_answers(monkeypatch):
    """The client factory mints a token per client: while IAM Credentials answers 503 the request is retried,
    as for a Kubernetes 503, and the answer after the outage is returned."""
    monkeypatch.setattr(retry, "INITIAL_WAIT", 0.001)
    monkeypatch.setattr(retry, "MAX_WAIT", 0.01)
    calls = {"n": 0}

    class Client:
        def set_default_header(self, *a):
            pass

        def close(self):
            pass

    def factory():
        calls["n"] += 1
        if calls["n"] <= 3:
            raise gae.RefreshError(*IAM_503)
        return Client()

    api = k8s.KubernetesJobSetApi(factory, outage_timeout=5, sleep=lambda s: None)
    monkeypatch.setattr("kubernetes.client.CustomObjectsApi", lambda client: type(
        "Api", (), {"get_namespaced_custom_object": lambda self, **kw: {"metadata": {"name": kw["name"]}}})())
    assert api.get("ml", "llama-a1") == {"metadata": {"name": "llama-a1"}}
    assert calls["n"] == 4


def test_a_refused_token_fails_a_request_at_once(monkeypatch):
    calls = {"n": 0}

    def factory():
        calls["n"] += 1
        raise gae.RefreshError(*IAM_403)

    api = k8s.KubernetesJobSetApi(factory, outage_timeout=5, sleep=lambda s: None)
    with pytest.raises(k8s.Forbidden, match="mint a token"):
        api.get("ml", "llama-a1")
    assert calls["n"] == 1
