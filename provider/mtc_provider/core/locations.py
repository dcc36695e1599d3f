"""GCS bucket names and locations: a bucket lives in a region or multi-region, never a zone."""

from __future__ import annotations

import re

from mtc_provider.core.errors import SpecError

ZONE_RE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")
REGION_RE = re.compile(r"^[a-z]+-[a-z]+\d+$")
MULTI_REGIONS = frozenset({"us", "eu", "asia"})
DUAL_REGIONS = frozenset({"nam4", "eur4", "asia1", "eur5", "eur7", "eur8"})
BUCKET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")


def check_bucket_location(location: str, field: str = "bucket.location") -> str:
    text = str(location or "").strip().lower()
    zone = ZONE_RE.match(text)
    if zone:
        raise SpecError(
            field,
            location,
            f"a region or multi-region, not a zone: {location} is a zone of region {zone.group(1)}",
        )
    if text in MULTI_REGIONS or text in DUAL_REGIONS or REGION_RE.match(text):
        return text
    raise SpecError(field, location, "a region (e.g. us-central1) or multi-region (us, eu, asia)")


def check_bucket_name(name: str, field: str = "bucket.name") -> str:
    text = str(name or "")
    if text.startswith("gs://"):
        raise SpecError(field, name, "the bare bucket name, without gs://")
    if not BUCKET_NAME_RE.match(text) or ".." in text or text.startswith("goog"):
        raise SpecError(field, name, "3-63 lower-case letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
    return text
