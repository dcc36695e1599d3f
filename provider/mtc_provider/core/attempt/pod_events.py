"""What Kubernetes says about pods that do not start (pure): their volume events, with reason, message and node.

A pod whose MTC CSI ramdisk cannot be mounted (no CheckpointConfiguration selects its node, the MTC node
components not ready, a ramdisk the node cannot hold) is scheduled and stays Pending with its container waiting
`ContainerCreating`; the cause is only in the kubelet's events about it: `FailedMount` (MountVolume.SetUp failed,
retried with back-off) or `FailedAttachVolume` (https://kubernetes.io/docs/tasks/debug/debug-application/
debug-pods/: `kubectl describe pod` shows them; the Event fields:
https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

VOLUME_EVENT_REASONS = frozenset({"FailedMount", "FailedAttachVolume", "FailedMapVolume"})
MAX_LINES = 5  # per log line or failure message: one per pod, the newest first


def _pod_nodes(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pod name -> the node it was scheduled on ("" when not yet)."""
    return {(p.get("metadata") or {}).get("name", ""): (p.get("spec") or {}).get("nodeName") or "" for p in pods}


def volume_event_lines(events: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
                       limit: int = MAX_LINES) -> list[str]:
    """One line per pod of `pods` with a volume event: its newest one, `pod P on node N: REASON (xCOUNT): MESSAGE`.

    Events about other pods (the namespace's) are left out; the node is the event's (the kubelet's host), else the
    pod's. At most `limit` lines, and a last one saying how many pods more."""
    nodes = _pod_nodes(pods)
    newest: dict[str, Mapping[str, Any]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        name = involved.get("name", "")
        if involved.get("kind", "Pod") != "Pod" or name not in nodes or event.get("reason") not in VOLUME_EVENT_REASONS:
            continue
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if name not in newest or when >= str(newest[name].get("lastTimestamp") or newest[name].get("eventTime") or ""):
            newest[name] = event
    lines = []
    for name in sorted(newest):
        event = newest[name]
        node = (event.get("source") or {}).get("host") or nodes.get(name) or "no node"
        count = int(event.get("count") or 1)
        times = f" (x{count})" if count > 1 else ""
        lines.append(f"pod {name} on node {node}: {event.get('reason')}{times}: {event.get('message', '')}")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more pods with volume events"]
    return lines
