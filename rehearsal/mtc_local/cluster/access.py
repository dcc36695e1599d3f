"""Authorization on the local API server: who the home's token is, what it may not do, and SelfSubjectAccessReview.

The home's bearer token authenticates as one user, `mtc-local`, allowed everything (as a cluster admin) except what
`<home>/access-denied.json` lists: `[{"verb": "get", "resource": "configmaps", "group": ""}, ...]`, so a rehearsal
or a test can take one permission away (`deny`) and see what the provider does without it. A denied request is
403 Forbidden with the API server's own sentence (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/errors.go
ForbiddenStatusError over apimachinery errors.NewForbidden): `configmaps "x" is forbidden: User "mtc-local" cannot
get resource "configmaps" in API group "" in the namespace "default"`.
SelfSubjectAccessReview (authorization.k8s.io/v1, https://kubernetes.io/docs/reference/access-authn-authz/
authorization/#checking-api-access) answers the same rules: `status.allowed`, and `status.reason` when allowed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mtc_local.cluster.errors import StatusError

USER = "mtc-local"
DENIED_FILE = "access-denied.json"
REVIEW_API = "authorization.k8s.io/v1"


def denied_path(home_root: str | os.PathLike[str]) -> Path:
    return Path(home_root) / DENIED_FILE


def deny(home_root: str | os.PathLike[str], verb: str, resource: str, group: str = "") -> None:
    """From now on, the home's token may not `verb` `resource` (in API group `group`): a 403 on every such request."""
    rules = read_denied(home_root)
    rule = {"verb": verb, "resource": resource, "group": group}
    if rule not in rules:
        rules.append(rule)
    path = denied_path(home_root)
    tmp = path.with_name(f".{DENIED_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rules))
    os.replace(tmp, path)


def allow_all(home_root: str | os.PathLike[str]) -> None:
    denied_path(home_root).unlink(missing_ok=True)


def read_denied(home_root: str | os.PathLike[str]) -> list[dict[str, str]]:
    try:
        rules = json.loads(denied_path(home_root).read_text())
    except (OSError, ValueError):
        return []
    return [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []


class Access:
    """The rules of one home, read again whenever the file changes."""

    def __init__(self, home_root: str | os.PathLike[str] | None) -> None:
        self.home_root = home_root

    def allowed(self, verb: str, group: str, resource: str) -> bool:
        if self.home_root is None:
            return True
        return not any(r.get("verb") in (verb, "*") and r.get("resource") in (resource, "*")
                       and r.get("group", "") == group for r in read_denied(self.home_root))

    def check(self, verb: str, group: str, plural: str, sub: str | None, namespace: str | None,
              name: str | None) -> None:
        """Raise the API server's 403 when the request is denied."""
        resource = f"{plural}/{sub}" if sub else plural
        if self.allowed(verb, group, resource):
            return
        what = f' resource "{plural}"' + (f' with subresource "{sub}"' if sub else "") + f' in API group "{group}"'
        scope = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        reason = f'User "{USER}" cannot {verb}{what}{scope}'
        qualified = f"{plural}.{group}" if group else plural
        message = f'{qualified} "{name}" is forbidden: {reason}' if name else f"{qualified} is forbidden: {reason}"
        details = {"kind": plural, **({"name": name} if name else {}), **({"group": group} if group else {})}
        raise StatusError(403, "Forbidden", message, details)

    def review(self, body: Any) -> dict[str, Any]:
        """A SelfSubjectAccessReview's answer: the spec echoed, status.allowed from the same rules."""
        spec = (body or {}).get("spec") if isinstance(body, dict) else None
        attributes = (spec or {}).get("resourceAttributes")
        if not isinstance(attributes, dict):
            raise StatusError(422, "Invalid", "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: "
                              "spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or "
                              "resourceAttributes must be specified")
        sub = attributes.get("subresource") or ""
        resource = attributes.get("resource", "") + (f"/{sub}" if sub else "")
        allowed = self.allowed(attributes.get("verb", ""), attributes.get("group", ""), resource)
        status: dict[str, Any] = {"allowed": allowed}
        if allowed:
            status["reason"] = f"{USER} may do everything the local cluster serves"
        return {"kind": "SelfSubjectAccessReview", "apiVersion": REVIEW_API, "metadata": {"creationTimestamp": None},
                "spec": spec, "status": status}
