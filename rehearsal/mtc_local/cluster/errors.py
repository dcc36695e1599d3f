"""API errors as `Status` bodies with the reasons and codes a real API server uses.

https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/status/ (fields) and
https://github.com/kubernetes/apimachinery/blob/master/pkg/api/errors/errors.go (the exact wording of each message).
"""

from __future__ import annotations

from typing import Any

from mtc_local.cluster.resources import Resource


class StatusError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def body(self) -> dict[str, Any]:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
                "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(resource: Resource, name: str) -> dict[str, Any]:
    details = {"name": name, "kind": resource.plural}
    if resource.group:
        details["group"] = resource.group
    return details


def not_found(resource: Resource, name: str) -> StatusError:
    return StatusError(404, "NotFound", f'{resource.qualified_name} "{name}" not found', _details(resource, name))


def already_exists(resource: Resource, name: str, being_deleted: bool = False) -> StatusError:
    prefix = "object is being deleted: " if being_deleted else ""
    return StatusError(409, "AlreadyExists", f'{prefix}{resource.qualified_name} "{name}" already exists',
                       _details(resource, name))


def conflict(resource: Resource, name: str) -> StatusError:
    return StatusError(409, "Conflict", f'Operation cannot be fulfilled on {resource.qualified_name} "{name}": the object '
                       "has been modified; please apply your changes to the latest version and try again",
                       _details(resource, name))


def expired(requested: int, current: int) -> StatusError:
    """A watch (or list) from a resourceVersion older than the server still keeps: 410 with reason Expired."""
    return StatusError(410, "Expired", f"too old resource version: {requested} ({current})")


def invalid(resource: Resource, name: str, causes: list[dict[str, str]]) -> StatusError:
    """422 with one cause per field: `Kind.group "name" is invalid: field: Invalid value: ...`."""
    listed = [f"{c['field']}: {c['message']}" for c in causes]
    summary = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    details = {**_details(resource, name), "kind": resource.kind, "causes": causes}
    return StatusError(422, "Invalid", f'{resource.group_kind} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> StatusError:
    return StatusError(405, "MethodNotAllowed", message)


def unauthorized() -> StatusError:
    return StatusError(401, "Unauthorized", "Unauthorized")


def unsupported_media_type(message: str) -> StatusError:
    return StatusError(415, "UnsupportedMediaType", message)


def forbidden_by_webhook(webhook: str, message: str) -> StatusError:
    """A validating admission webhook's denial: 403 Forbidden, `admission webhook "<name>" denied the request: ...`
    (k8s.io/apiserver webhook errors.ToStatusErr over controller-runtime's admission.Denied)."""
    return StatusError(403, "Forbidden", f'admission webhook "{webhook}" denied the request: {message}')
