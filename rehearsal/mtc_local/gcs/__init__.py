"""The local target's GCS: the GCS JSON API over `<home>/buckets/` (server.py), started per home in the
background (lifecycle.py), with listing outages on demand (faults.py)."""

from mtc_local.gcs.faults import clear as clear_faults, fail_listings
from mtc_local.gcs.lifecycle import endpoint, ensure_running, stop

__all__ = ["clear_faults", "endpoint", "ensure_running", "fail_listings", "stop"]
