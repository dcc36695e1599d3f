"""Where a multi-slice run's slices may go (pure): one node pool each, never all in one.

Each slice is a node pool (GKE "Deploy TPU Multislices"), and the JobSet places one Job per pool
(`alpha.jobset.sigs.k8s.io/exclusive-topology: cloud.google.com/gke-nodepool`). A node selector naming one pool
(`cloud.google.com/gke-nodepool: POOL`) sends every slice's pods to that pool: the first slice takes it, the others
stay Pending for ever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mtc_provider.core.basics.errors import SpecError

if TYPE_CHECKING:
    from mtc_provider.core.definition.render.customization import CustomizationSpec

NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"


def check_slice_placement(customization: CustomizationSpec, num_slices: int) -> None:
    """SpecError when a run of several slices pins its pods to one node pool."""
    pinned = (customization.node_selector or {}).get(NODE_POOL_LABEL)
    if pinned is not None and num_slices > 1:
        raise SpecError(f"customization.node_selector.{NODE_POOL_LABEL}", pinned,
                        f"no node pool selector for a run of {num_slices} slices: each slice is its own node pool "
                        "and JobSet places one Job per pool (exclusive-topology), so a selector naming one pool "
                        "leaves every other slice Pending; select the slices' nodes by labels every pool carries "
                        "(the TPU accelerator and topology are already selected), or set slices.num_slices to 1")
