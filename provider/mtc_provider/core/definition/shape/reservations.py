"""A reservation as gcloud and xpk name it, and the node labels that select its nodes (pure).

Forms (gcloud `container node-pools create --reservation`, xpk `core/reservation.py` `to_reservation_path`):
- `NAME`: a reservation of the cluster's project;
- `projects/OWNER/reservations/NAME`: a shared reservation owned by project OWNER (Compute Engine
  `ReservationAffinity.values`: "projects/different-project/reservations/some-reservation-name" targets a shared
  reservation, https://cloud.google.com/compute/docs/reference/rest/v1/ReservationAffinity);
- either followed by `/reservationBlocks/BLOCK` and optionally `/reservationSubBlocks/SUB`: one block (sub-block)
  of a TPU reservation.
The node pool's `reservationAffinity.values` takes the path as given. A pod selects those nodes by labels, and a label
value cannot hold '/', so the path is split over the labels GKE puts on reserved nodes: `cloud.google.com/
reservation-name` (NAME) with `cloud.google.com/reservation-affinity: specific` (GKE "Consuming reserved zonal
resources"), `cloud.google.com/reservation-project` (OWNER, for a shared reservation: same page, and GKE's custom
compute classes map it to `priorities.reservations.specific.project`), `cloud.google.com/reservation-blocks` and
`cloud.google.com/reservation-subblocks` (the labels GKE's node auto-provisioning and Google's Cluster Toolkit set
for a block and a sub-block: cluster-toolkit's GKE orchestrator `injectProvisioningLabels`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mtc_provider.core.basics.errors import SpecError

NAME_LABEL = "cloud.google.com/reservation-name"
AFFINITY_LABEL = "cloud.google.com/reservation-affinity"
PROJECT_LABEL = "cloud.google.com/reservation-project"
BLOCKS_LABEL = "cloud.google.com/reservation-blocks"
SUB_BLOCKS_LABEL = "cloud.google.com/reservation-subblocks"

# Compute Engine resource names (RFC 1035): a lower-case letter first, then letters, digits, '-', at most 63.
_GCE_NAME = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
# Project IDs: 6 to 30 characters, a letter first, no '-' last (Resource Manager "Creating and managing projects").
_PROJECT_ID = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"
_PATH = re.compile(rf"^(?:projects/(?P<project>{_PROJECT_ID})/reservations/)?(?P<name>{_GCE_NAME})"
                   rf"(?:/reservationBlocks/(?P<block>{_GCE_NAME})(?:/reservationSubBlocks/(?P<sub>{_GCE_NAME}))?)?$")
ALLOWED = ("a reservation as gcloud's --reservation takes it: NAME, projects/OWNER_PROJECT/reservations/NAME (shared), "
           "either followed by /reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK]; names are lower-case "
           "letters, digits and '-', a letter first, at most 63 characters; OWNER_PROJECT a project ID (6-30)")


@dataclass(frozen=True)
class Reservation:
    name: str
    project: str = ""
    block: str = ""
    sub_block: str = ""

    @property
    def node_selector(self) -> dict[str, str]:
        """The labels the reservation's nodes carry, as the pods select them."""
        selector = {NAME_LABEL: self.name, AFFINITY_LABEL: "specific"}
        for label, value in ((PROJECT_LABEL, self.project), (BLOCKS_LABEL, self.block),
                             (SUB_BLOCKS_LABEL, self.sub_block)):
            if value:
                selector[label] = value
        return selector


def parse_reservation(field: str, value: object) -> Reservation:
    """The reservation `value` names, or SpecError naming `field`, the value and the forms allowed."""
    found = _PATH.match(value) if isinstance(value, str) else None
    if not found:
        raise SpecError(field, value, ALLOWED)
    return Reservation(found["name"], found["project"] or "", found["block"] or "", found["sub"] or "")
