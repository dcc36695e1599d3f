"""The facts the tests take from the emergency checkpointing guide, written here (the guide's prose is not copied).

`tests/docs/test_guide_facts.py` compares this table with the guide where the guide is present beside the
repository (../shared/reference/000_b69431a3bd8f2db4.txt) and skips, saying so, where it is not.
"""

from __future__ import annotations

GUIDE_FILE = "000_b69431a3bd8f2db4.txt"

# Every gcloud call of the guide, in its order: (command words, flags). A command may appear more than once.
GCLOUD_CALLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gcloud config set project", ()),
    ("gcloud config set compute/zone", ()),
    ("gcloud storage buckets create", ("--location", "--hierarchical-namespace")),
    ("gcloud container clusters update", ("--workload-pool", "--location")),
    ("gcloud container clusters update", ("--update-addons", "--location")),
    ("gcloud container clusters create", ("--workload-pool", "--addons", "--location", "--cluster-version")),
    ("gcloud container clusters describe", ("--location", "--format")),
    ("gcloud container node-pools create",
     ("--cluster", "--location", "--node-locations", "--machine-type", "--tpu-topology")),
    ("gcloud container clusters get-credentials", ("--location", "--project")),
    ("gcloud projects describe", ("--format",)),
    ("gcloud storage buckets add-iam-policy-binding", ("--member", "--role")),
    ("gcloud storage buckets add-iam-policy-binding", ("--member", "--role")),
)

# The guide's table of MaxText checkpointing flags: name -> (type, default), in its order.
MAXTEXT_FLAGS: dict[str, tuple[str, object]] = {
    "enable_checkpointing": ("boolean", True),
    "enable_emergency_checkpoint": ("boolean", False),
    "async_checkpointing": ("boolean", True),
    "local_checkpoint_directory": ("string", ""),
    "local_checkpoint_period": ("integer", 0),
    "checkpoint_period": ("integer", 10000),
    "enable_single_replica_ckpt_restoring": ("boolean", False),
    "enable_autocheckpoint": ("boolean", False),
}

# The two flags of `gcluster job submit` the guide names for the ramdisk.
GCLUSTER_FLAGS = ("--gke-mtc-enabled", "--gke-mtc-ramdisk-dir")
