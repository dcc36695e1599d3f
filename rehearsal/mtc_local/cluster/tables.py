"""`kubectl get` output: the server-side Table (meta.k8s.io/v1) kubectl asks for with `Accept: ...;as=Table`.

https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables; the columns are those of
kubectl's pod printer and of the JobSet CRD's additionalPrinterColumns.
"""

from __future__ import annotations

import calendar
import time
from typing import Any, Callable

Columns = list[tuple[str, str, Callable[[dict[str, Any]], Any]]]


def human_age(timestamp: str | None, now: float | None = None) -> str:
    """apimachinery's duration.HumanDuration, as kubectl prints AGE."""
    if not timestamp:
        return "<unknown>"
    seconds = int((now or time.time()) - calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ")))
    if seconds < 0:
        return "0s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def _age(obj: dict[str, Any]) -> str:
    return human_age(obj["metadata"].get("creationTimestamp"))


def pod_status(pod: dict[str, Any]) -> str:
    """The STATUS column: Terminating, else the container's waiting/terminated reason, else the phase."""
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for status in pod.get("status", {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        for key in ("waiting", "terminated"):
            if state.get(key, {}).get("reason"):
                return state[key]["reason"]
    return pod.get("status", {}).get("phase", "Unknown")


def _ready(pod: dict[str, Any]) -> str:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(pod.get('spec', {}).get('containers') or statuses)}"


def _condition(obj: dict[str, Any], kind: str) -> str:
    return next((c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), "")


COLUMNS: dict[str, Columns] = {
    "pods": [("Ready", "string", _ready), ("Status", "string", pod_status),
             ("Restarts", "integer", lambda p: sum(s.get("restartCount", 0)
                                                   for s in p.get("status", {}).get("containerStatuses") or [])),
             ("Age", "string", _age)],
    "jobsets": [("TerminalState", "string", lambda o: (o.get("status") or {}).get("terminalState", "")),
                ("Restarts", "string", lambda o: str((o.get("status") or {}).get("restarts", ""))),
                ("Completed", "string", lambda o: _condition(o, "Completed")),
                ("Suspended", "string", lambda o: str((o.get("spec") or {}).get("suspend", ""))),
                ("Age", "string", _age)],
    "configmaps": [("Data", "integer", lambda o: len(o.get("data") or {})), ("Age", "string", _age)],
    "namespaces": [("Status", "string", lambda o: "Terminating" if o["metadata"].get("deletionTimestamp")
                    else "Active"), ("Age", "string", _age)],
}


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def table(plural: str, items: list[dict[str, Any]], resource_version: str, include_object: str = "Metadata",
          with_columns: bool = True) -> dict[str, Any]:
    columns = COLUMNS.get(plural, [("Age", "string", _age)])
    rows = []
    for obj in items:
        row_object = obj if include_object == "Object" else (None if include_object == "None" else _partial(obj))
        rows.append({"cells": [obj["metadata"]["name"], *(get(obj) for _, _, get in columns)], "object": row_object})
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
    definitions += [{"name": name, "type": kind, "format": "", "description": name, "priority": 0}
                    for name, kind, _ in columns]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": definitions if with_columns else [], "rows": rows}
