"""GCS JSON API errors with the body GCS sends (https://cloud.google.com/storage/docs/json_api/v1/status-codes):
`{"error": {"code": 404, "message": "...", "errors": [{"message": "...", "domain": "global", "reason": "notFound"}]}}`.
"""

from __future__ import annotations

from typing import Any


class GcsError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message,
                          "errors": [{"message": self.message, "domain": "global", "reason": self.reason}]}}


def invalid(message: str) -> GcsError:
    return GcsError(400, "invalid", message)


def unauthenticated() -> GcsError:
    return GcsError(401, "required", "Anonymous caller does not have access to the local GCS: send "
                    "'Authorization: Bearer <token>' with the token in <home>/supervisor.token.")


def invalid_credentials() -> GcsError:
    return GcsError(401, "authError", "Invalid Credentials: the bearer token is not this home's "
                    "(<home>/supervisor.token).")


def bucket_not_found(bucket: str) -> GcsError:
    return GcsError(404, "notFound", "The specified bucket does not exist.")


def object_not_found(bucket: str, name: str) -> GcsError:
    return GcsError(404, "notFound", f"No such object: {bucket}/{name}")


def bucket_conflict() -> GcsError:
    return GcsError(409, "conflict", "Your previous request to create the named bucket succeeded and you already own it.")


def condition_not_met(message: str = "At least one of the pre-conditions you specified did not hold.") -> GcsError:
    return GcsError(412, "conditionNotMet", message)


# What an outage of listings answers (the fault control file chooses the status).
OUTAGES = {
    403: ("forbidden", "local-target@mtc.local does not have storage.objects.list access to the Google Cloud Storage "
                       "bucket. Permission 'storage.objects.list' denied on resource (or it may not exist)."),
    429: ("rateLimitExceeded", "The project exceeded the rate limit for Cloud Storage."),
    503: ("backendError", "We encountered an internal error. Please try again."),
}


def outage(status: int) -> GcsError:
    reason, message = OUTAGES[status]
    return GcsError(status, reason, message)
