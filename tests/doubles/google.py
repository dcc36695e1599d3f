"""What every Google API double shares: Google's error body, an OAuth token endpoint and IAM impersonation.

- Errors as Google's JSON APIs send them (https://cloud.google.com/apis/design/errors#http_mapping):
  `{"error": {"code", "message", "status", "errors": [{"message", "reason"}]}}`.
- `POST /token` issues OAuth access tokens (a service-account keyfile's `token_uri` can point here).
- `POST /v1/projects/-/serviceAccounts/SA:generateAccessToken` impersonates SA: the caller's token buys a token for
  the service account (https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/
  generateAccessToken); `impersonated` records (service account, the caller's token).
"""

from __future__ import annotations

from typing import Any

from tests.doubles.http import HttpDouble, match

GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 409: "ABORTED", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}
AUTH_PATHS = (r"/token", r"/v1/projects/-/serviceAccounts/(?P<sa>[^/:]+):generateAccessToken")


class GoogleApiDouble(HttpDouble):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.issued = 0
        self.impersonated: list[tuple[str, str]] = []

    def error_body(self, status: int, message: str, reason: str = "") -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "status": reason or GOOGLE_STATUS.get(status, "UNKNOWN"),
                          "errors": [{"message": message, "reason": reason or "error"}]}}

    def answer(self, method: str, path: str, query: dict, body: Any, token: str) -> Any:
        if path == "/token" and method == "POST":
            self.issued += 1
            return 200, {"access_token": f"token-{self.issued}", "expires_in": 3600, "token_type": "Bearer"}
        if (m := match(AUTH_PATHS[1], path)) and method == "POST":
            self.impersonated.append((m["sa"], token))
            return 200, {"accessToken": f"impersonated-{m['sa']}", "expireTime": "2099-01-01T00:00:00Z"}
        return None

