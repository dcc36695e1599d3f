"""Spot and reservation capacity of TPU node pools (pure): what the node-pool operator creates, what readiness checks.

`customization.capacity` (core.definition.render.customization) makes the JobSet's pods select Spot nodes (`cloud.google.com/gke-spot`)
or a specific reservation's nodes (`cloud.google.com/reservation-name`); pods that select nodes no pool has stay
Pending for ever. So the node-pool operator creates pools of that capacity and readiness counts only pools of it:
- Spot: `NodeConfig.spot: true` (GKE "Spot VMs", https://cloud.google.com/kubernetes-engine/docs/how-to/spot-vms:
  `gcloud container node-pools create --spot`; GKE labels the nodes `cloud.google.com/gke-spot=true`).
- Reservation: `NodeConfig.reservationAffinity {consumeReservationType: SPECIFIC_RESERVATION, key:
  compute.googleapis.com/reservation-name, values: [NAME]}` (GKE "Consuming reserved zonal resources",
  https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations: `--reservation-affinity=specific
  --reservation=NAME`); NAME may be a shared reservation's or a block's path, sent as given
  (core.definition.shape.reservations).
"""

from __future__ import annotations

from typing import Any, Mapping

from mtc_provider.core.definition.render.customization import CAPACITIES
from mtc_provider.core.basics.errors import require
from mtc_provider.core.definition.shape.reservations import parse_reservation

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
SPECIFIC_RESERVATION = "SPECIFIC_RESERVATION"
# The Container API answers enum names; google-cloud-container's REST transport sends enums as integers
# (ReservationAffinity.Type.SPECIFIC_RESERVATION = 3), which the API accepts alike.
SPECIFIC_RESERVATION_VALUES = (SPECIFIC_RESERVATION, 3, "3")


def check_capacity(capacity: Any, reservation: Any, field: str = "capacity") -> tuple[str, str]:
    """(capacity, reservation) validated as customization validates them (field, value, what is allowed)."""
    capacity = capacity or "on-demand"
    reservation = reservation or ""
    require(capacity in CAPACITIES, field, capacity, ", ".join(CAPACITIES))
    if capacity == "reservation":
        require(bool(reservation), "reservation", reservation, "the reservation's name when capacity is reservation")
        parse_reservation("reservation", reservation)  # NAME, a shared reservation's path, a block's
    require(not reservation or capacity == "reservation", "reservation", reservation,
            "empty unless capacity is reservation")
    return capacity, reservation


def pool_capacity(pool: Mapping[str, Any]) -> tuple[str, str]:
    """A node pool's capacity (Container API JSON): ("spot", ""), ("reservation", NAME) or ("on-demand", "")."""
    config = pool.get("config") or {}
    if config.get("spot"):
        return "spot", ""
    affinity = config.get("reservationAffinity") or {}
    if affinity.get("consumeReservationType") in SPECIFIC_RESERVATION_VALUES and affinity.get("key") == RESERVATION_KEY:
        return "reservation", ((affinity.get("values") or [""])[0])
    return "on-demand", ""


def describe(capacity: str, reservation: str) -> str:
    return f"reservation {reservation}" if capacity == "reservation" else capacity
