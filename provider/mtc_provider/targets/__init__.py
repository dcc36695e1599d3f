"""Targets: where a run goes. Each kind is a room of its own (`targets/gke/`, `targets/kubernetes/`, and the
rehearsal's `mtc_local.target` in the mtc-local distribution) that owns its backend (cluster control, JobSet
connection, bucket, checkpoint store, console links) behind adapters/protocols.py; `registry` is the one registry,
fed by the `mtc_provider.targets` entry points."""

from mtc_provider.targets.registry import (TargetKind, async_jobset_api, backend_for, connection_for,
                                           describe_connection, jobset_api, kind_of, kinds, registered,
                                           registered_jobset_api)

__all__ = ["TargetKind", "async_jobset_api", "backend_for", "connection_for", "describe_connection", "jobset_api",
           "kind_of", "kinds", "registered", "registered_jobset_api"]
