"""TPU node pool settings the Container API does not default the way gcloud does: zones and OAuth scopes (pure).

Zones: a node pool created without `locations` gets every zone of the cluster (Container API, NodePool.locations:
"If this value is unspecified during node pool creation, the Cluster.Locations value will be used"); a regional
cluster spans several zones and a TPU slice exists in one, so a regional cluster needs the zone said. The guide
(section "Configure the GKE cluster", step "Create the TPU node pool") passes `--node-locations=${TPU_ZONE}`.

Scopes: the API adds none when `config.oauthScopes` is unset (container.v1 discovery document, NodeConfig.oauthScopes:
"If unspecified, no scopes are added"), and pulling the image from Artifact Registry needs devstorage.read_only.
gcloud adds its `gke-default` alias; GKE documents the scopes it adds per node service account
(https://cloud.google.com/kubernetes-engine/docs/how-to/access-scopes, "Default access scopes", Standard clusters):
the Compute Engine default service account gets the six below, a custom service account gets cloud-platform (its
IAM roles then decide). xpk passes `storage-full,gke-default,cloud-platform` (AI-Hypercomputer/xpk
src/xpk/core/nodepool.py@v1.13.0); we keep gcloud's narrower default: with Workload Identity (GKE_METADATA) the
training pods use their Kubernetes service account's identity, not the node's scopes.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.locations import REGION_RE, ZONE_RE

SCOPE_PREFIX = "https://www.googleapis.com/auth/"
GKE_DEFAULT_SCOPES = tuple(SCOPE_PREFIX + scope for scope in ("devstorage.read_only", "logging.write", "monitoring",
                                                              "service.management.readonly", "servicecontrol",
                                                              "trace.append"))
CLOUD_PLATFORM_SCOPE = SCOPE_PREFIX + "cloud-platform"
SERVICE_ACCOUNT_RE = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9.-]+\.iam\.gserviceaccount\.com$"
                                r"|^[0-9]+-compute@developer\.gserviceaccount\.com$|^default$")


def is_regional(location: str) -> bool:
    """`us-central1` is a region (a regional cluster), `us-central1-a` a zone (a zonal cluster)."""
    return bool(REGION_RE.match(str(location or "")))


def region_of(location: str) -> str:
    zone = ZONE_RE.match(str(location or ""))
    return zone.group(1) if zone else str(location or "")


def node_locations(cluster_location: str, given: Sequence[str] | str | None,
                   field: str = "node_locations") -> list[str]:
    """The zones of the cluster's TPU node pools: the given ones (zones of the cluster's region), else the zonal
    cluster's own zone; a regional cluster without them is refused (its pools would span every zone)."""
    if isinstance(given, str):
        given = [part.strip() for part in given.split(",") if part.strip()]
    zones = list(given or [])
    if not zones:
        if is_regional(cluster_location):
            raise SpecError(field, given, f"the TPU zone for the node pools, e.g. {cluster_location}-a: cluster "
                            f"location {cluster_location} is a region, and a pool created without zones spans every "
                            "zone of a regional cluster while a TPU slice exists in one (the guide's "
                            "--node-locations=${TPU_ZONE})")
        return [cluster_location]
    region = region_of(cluster_location)
    for zone in zones:
        if not isinstance(zone, str) or not ZONE_RE.match(zone):
            raise SpecError(field, zone, "a zone such as us-central1-a (not a region)")
        if region_of(zone) != region:
            raise SpecError(field, zone, f"a zone of the cluster's region {region} (cluster location "
                            f"{cluster_location})")
    return zones


def node_scopes(scopes: Sequence[str] | None, service_account: str | None, field: str = "oauth_scopes") -> list[str]:
    """The node pool's OAuth scopes: the given ones, else GKE's default for the node service account."""
    if scopes:
        if isinstance(scopes, str):
            raise SpecError(field, scopes, f"a list of scope URLs starting with {SCOPE_PREFIX}")
        for scope in scopes:
            if not isinstance(scope, str) or not scope.startswith(SCOPE_PREFIX):
                raise SpecError(field, scope, f"a scope URL starting with {SCOPE_PREFIX}, e.g. {GKE_DEFAULT_SCOPES[0]}")
        return list(dict.fromkeys(scopes))
    return [CLOUD_PLATFORM_SCOPE] if service_account and service_account != "default" else list(GKE_DEFAULT_SCOPES)


def check_node_service_account(value: Any, field: str = "node_service_account") -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not SERVICE_ACCOUNT_RE.match(value):
        raise SpecError(field, value, "a Google service account email (NAME@PROJECT.iam.gserviceaccount.com), "
                        "or empty for the Compute Engine default service account")
    return value
