"""The local JobSet runner: the local cluster's JobSet controller and kubelet. It runs a JobSet as local processes,
with MTC ramdisks on tmpfs and injected faults, inside a detached supervisor (one per home) that also hosts the
cluster's API server (mtc_local.cluster; the supervisor is mtc_local.supervisor); clients use the same Kubernetes
adapter as on GKE. The runner imports nothing of the cluster; what both need of a home is in mtc_local.shared.
"""
