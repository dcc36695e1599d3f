"""May this identity do what the provider needs in a namespace? One SelfSubjectAccessReview per verb and resource.

SelfSubjectAccessReview (authorization.k8s.io/v1) asks the API server's authorizer about the caller itself; every
authenticated user may create one (https://kubernetes.io/docs/reference/access-authn-authz/authorization/
#checking-api-access). Answers feed core.definition.cluster.readiness.evaluate_rbac.
"""

from __future__ import annotations

from typing import Any, Callable

from mtc_provider.adapters import retry
from mtc_provider.adapters.protocols import ApiError
from mtc_provider.core.definition.cluster.readiness import Check, evaluate_rbac, rbac_key, rbac_permissions

REVIEW_API = "authorization.k8s.io/v1"


def allowed_permissions(api_client: Any, namespace: str) -> dict[str, bool]:
    """`rbac_key` -> status.allowed for every permission of core.definition.cluster.readiness.RBAC_NEEDS."""
    from kubernetes import client as k8s

    api = k8s.AuthorizationV1Api(api_client)
    answers = {}
    for verb, group, resource in rbac_permissions():
        plural, _, sub = resource.partition("/")
        review = k8s.V1SelfSubjectAccessReview(spec=k8s.V1SelfSubjectAccessReviewSpec(
            resource_attributes=k8s.V1ResourceAttributes(namespace=namespace, verb=verb, group=group,
                                                         resource=plural, subresource=sub or None)))
        answer = retry.call(api.create_self_subject_access_review, review)
        answers[rbac_key(verb, group, resource)] = bool(answer.status and answer.status.allowed)
    return answers


def rbac_checks(client_factory: Callable[[], Any], namespace: str) -> list[Check]:
    """The RBAC checks of readiness for the identity `client_factory`'s clients authenticate as."""
    api_client = client_factory()
    try:
        return evaluate_rbac(allowed_permissions(api_client, namespace), namespace)
    except ApiError as exc:  # the question itself failed: say so in the report rather than guess
        return [Check("rbac_review", False, f"SelfSubjectAccessReview failed: {exc}",
                      f"{REVIEW_API} SelfSubjectAccessReview answered", "check the connection and the API server")]
    finally:
        close = getattr(api_client, "close", None)
        if close:
            close()
