"""Shared reservations and reservation blocks, end to end through the run description, and a node-pool selector
that would pin every slice of a multi-slice run to one pool (pure: the plan and the rendered JobSet).

Sources: gcloud `container node-pools create --reservation` and xpk `core/reservation.py` `to_reservation_path`
(the path forms); Compute Engine `ReservationAffinity.values` ("projects/different-project/reservations/NAME" for a
shared reservation); GKE "Consuming reserved zonal resources" (`cloud.google.com/reservation-name`,
`-affinity`, `-project`); GKE's block labels `cloud.google.com/reservation-blocks` / `-subblocks` (as Google's
Cluster Toolkit sets them); JobSet `exclusive-topology: cloud.google.com/gke-nodepool` (one Job per pool).
"""

from __future__ import annotations

import pytest
from core_helpers import gke_config

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.shape.capacity import check_capacity
from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run, pod_template
from mtc_provider.core.definition.description.spec import RunConfig

BASE = {"cloud.google.com/reservation-affinity": "specific"}


@pytest.mark.parametrize("reservation, labels", [
    ("tpu-res", {"cloud.google.com/reservation-name": "tpu-res"}),
    ("projects/owner-proj/reservations/tpu-res",
     {"cloud.google.com/reservation-name": "tpu-res", "cloud.google.com/reservation-project": "owner-proj"}),
    ("tpu-res/reservationBlocks/block-7",
     {"cloud.google.com/reservation-name": "tpu-res", "cloud.google.com/reservation-blocks": "block-7"}),
    ("tpu-res/reservationBlocks/block-7/reservationSubBlocks/sub-2",
     {"cloud.google.com/reservation-name": "tpu-res", "cloud.google.com/reservation-blocks": "block-7",
      "cloud.google.com/reservation-subblocks": "sub-2"}),
    ("projects/owner-proj/reservations/tpu-res/reservationBlocks/block-7/reservationSubBlocks/sub-2",
     {"cloud.google.com/reservation-name": "tpu-res", "cloud.google.com/reservation-project": "owner-proj",
      "cloud.google.com/reservation-blocks": "block-7", "cloud.google.com/reservation-subblocks": "sub-2"}),
])
def test_each_reservation_form_renders_label_selectors_and_keeps_the_path_for_the_node_pool(reservation, labels):
    config = RunConfig.from_dict(gke_config(customization={"capacity": "reservation", "reservation": reservation}))
    selector = pod_template(build_jobset_for_run(config))["spec"]["nodeSelector"]
    reserved = {key: value for key, value in selector.items() if key.startswith("cloud.google.com/reservation-")}
    assert reserved == {**labels, **BASE}
    assert all("/" not in value for value in selector.values())  # a label value cannot hold '/'
    # the node pool operator's body takes the path as gcloud passes it (ReservationAffinity.values)
    assert check_capacity("reservation", reservation) == ("reservation", reservation)


@pytest.mark.parametrize("reservation", [
    "projects/owner-proj/reservations/",  # no name
    "projects/Owner/reservations/tpu-res",  # a project ID is lower-case
    "tpu-res/reservationBlocks/",
    "tpu-res/reservationSubBlocks/sub-2",  # a sub-block belongs to a block
    "tpu-res/blocks/b1",
    "Tpu-Res",
])
def test_malformed_reservation_paths_name_the_field_and_the_forms(reservation):
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(gke_config(customization={"capacity": "reservation", "reservation": reservation}))
    assert caught.value.field == "customization.reservation" and caught.value.value == reservation
    assert "projects/OWNER_PROJECT/reservations/NAME" in caught.value.allowed
    assert "/reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK]" in caught.value.allowed
    with pytest.raises(SpecError) as operator:
        check_capacity("reservation", reservation)
    assert operator.value.field == "reservation"


def test_a_node_pool_selector_is_refused_for_a_multi_slice_run():
    pinned = {"node_selector": {"cloud.google.com/gke-nodepool": "pool-a"}}
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(gke_config(customization=pinned))  # 2 slices
    assert caught.value.field == "customization.node_selector.cloud.google.com/gke-nodepool"
    assert caught.value.value == "pool-a"
    assert "no node pool selector for a run of 2 slices" in caught.value.allowed
    from mtc_provider.core.definition.render.customization import CustomizationSpec
    from mtc_provider.core.definition.shape.slice_placement import check_slice_placement

    check_slice_placement(CustomizationSpec.from_value(pinned), 1)  # one slice: one pool is right
    other = RunConfig.from_dict(gke_config(customization={"node_selector": {"example.com/tier": "training"}}))
    assert other.slices.num_slices == 2  # other selectors stay allowed
