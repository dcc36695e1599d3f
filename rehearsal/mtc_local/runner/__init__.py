"""The local JobSet runner: the local cluster's JobSet controller and kubelet. It runs a JobSet as local processes,
with MTC ramdisks on tmpfs and injected faults, inside a detached supervisor (one per home) that also hosts the
cluster's API server (mtc_local.cluster); clients use the same Kubernetes adapter as on GKE.
"""
