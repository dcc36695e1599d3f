"""The two IAM principals of the guide and the role they get on the checkpoint bucket."""

from __future__ import annotations

from mtc_provider.core.basics.errors import require

BUCKET_ROLE = "roles/storage.objectUser"
CHECKPOINTING_NAMESPACE = "gke-managed-checkpointing"
CHECKPOINTING_KSA = "gke-checkpointing-multitier-node"


def workload_identity_pool(project_id: str) -> str:
    return f"{project_id}.svc.id.goog"


def ksa_principal(project_id: str, project_number: str, namespace: str, service_account: str) -> str:
    require(str(project_number).isdigit(), "cluster.project_number", project_number, "the project's number (digits)")
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/workloadIdentityPools/"
        f"{workload_identity_pool(project_id)}/subject/ns/{namespace}/sa/{service_account}"
    )


def bucket_members(project_id: str, project_number: str, namespace: str, service_account: str) -> list[str]:
    """Exactly the guide's two members: the GKE checkpointing daemon and the workload's KSA."""
    return [ksa_principal(project_id, project_number, CHECKPOINTING_NAMESPACE, CHECKPOINTING_KSA),
            ksa_principal(project_id, project_number, namespace, service_account)]
