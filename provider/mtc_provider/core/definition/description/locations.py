"""Google Cloud names and locations: GCS bucket names and locations, and project ids.

Each rule is the documented one, checked before anything is created (Google would refuse the value hours later,
at the first bucket call or the first persistent save):
- bucket names, Cloud Storage "Bucket naming" (https://cloud.google.com/storage/docs/buckets#naming): 3-63
  characters (up to 222 with dots, each dot-separated part at most 63) of lower-case letters, digits, '-', '_' and
  '.', starting and ending with a letter or digit; not an IP address in dotted-decimal notation; not beginning with
  "goog"; not containing "google" (or close misspellings such as "g00gle");
- bucket locations, Cloud Storage "Bucket locations" (https://cloud.google.com/storage/docs/locations): a region,
  a predefined dual-region or a multi-region from its list (a zone only for Rapid buckets, which MTC does not use);
- project ids, Resource Manager "Creating and managing projects" (https://cloud.google.com/resource-manager/docs/
  creating-managing-projects): 6-30 characters of lower-case letters, digits and hyphens, starting with a letter,
  not ending with a hyphen (the project number, all digits, is a different identifier).
"""

from __future__ import annotations

import re

from mtc_provider.core.basics.errors import SpecError

ZONE_RE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")
REGION_RE = re.compile(r"^[a-z]+-[a-z]+\d+$")  # the form of a Compute region (cluster locations); GCS: GCS_REGIONS
MULTI_REGIONS = frozenset({"us", "eu", "asia"})
DUAL_REGIONS = frozenset({"nam4", "eur4", "asia1", "eur5", "eur7", "eur8"})
# The regions of Cloud Storage's "Bucket locations" page (2026-12). A region Google adds later is refused until it
# is added here: the error names this list's source.
GCS_REGIONS = frozenset({
    "northamerica-northeast1", "northamerica-northeast2", "northamerica-south1",
    "us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1", "us-west2", "us-west3", "us-west4",
    "southamerica-east1", "southamerica-west1",
    "europe-central2", "europe-north1", "europe-north2", "europe-southwest1", "europe-west1", "europe-west2",
    "europe-west3", "europe-west4", "europe-west6", "europe-west8", "europe-west9", "europe-west10", "europe-west12",
    "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3", "asia-south1",
    "asia-south2", "asia-southeast1", "asia-southeast2",
    "australia-southeast1", "australia-southeast2",
    "me-central1", "me-central2", "me-west1",
    "africa-south1",
})
LOCATIONS_PAGE = "https://cloud.google.com/storage/docs/locations"
NAMING_PAGE = "https://cloud.google.com/storage/docs/buckets#naming"
PROJECT_ID_PAGE = "https://cloud.google.com/resource-manager/docs/creating-managing-projects"

BUCKET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
IPV4_RE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
# "google" and its close misspellings (0 for o, 9 for g): GCS refuses them anywhere in the name.
GOOGLE_RE = re.compile(r"[g9][o0][o0][g9]l[e3]")
PROJECT_ID_RE = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
BUCKET_NAME_ALLOWED = ("3-63 lower-case letters, digits, '-', '_' or '.' (up to 222 with dots, each dot-separated "
                       "part at most 63), starting and ending with a letter or digit")


def check_bucket_location(location: str, field: str = "bucket.location") -> str:
    text = str(location or "").strip().lower()
    zone = ZONE_RE.match(text)
    if zone:
        raise SpecError(field, location,
                        f"a region or multi-region, not a zone: {location} is a zone of region {zone.group(1)}")
    if text in MULTI_REGIONS or text in DUAL_REGIONS or text in GCS_REGIONS:
        return text
    raise SpecError(field, location, "a Cloud Storage location: a region (e.g. us-central1), a dual-region "
                    f"({', '.join(sorted(DUAL_REGIONS))}) or a multi-region (us, eu, asia); {LOCATIONS_PAGE}")


def check_bucket_name(name: str, field: str = "bucket.name") -> str:
    text = str(name or "")
    if text.startswith("gs://"):
        raise SpecError(field, name, "the bare bucket name, without gs://")
    parts = text.split(".")
    if (not BUCKET_NAME_RE.match(text) or ".." in text or len(text) < 3
            or len(text) > (222 if "." in text else 63) or any(len(part) > 63 for part in parts)):
        raise SpecError(field, name, f"{BUCKET_NAME_ALLOWED} ({NAMING_PAGE})")
    if IPV4_RE.match(text):
        raise SpecError(field, name, f"a name that is not an IP address in dotted-decimal notation ({NAMING_PAGE})")
    if text.startswith("goog") or GOOGLE_RE.search(text):
        raise SpecError(field, name, "a name that neither begins with 'goog' nor contains 'google' or a close "
                        f"misspelling such as 'g00gle' ({NAMING_PAGE})")
    return text


def check_project_id(project_id: str, field: str = "cluster.project_id") -> str:
    text = project_id if isinstance(project_id, str) else str(project_id or "")
    if text.isdigit():
        raise SpecError(field, project_id, "the project ID, not the project number (digits only): e.g. my-project-123, "
                        "as `gcloud projects describe NUMBER --format='value(projectId)'` shows it")
    if not PROJECT_ID_RE.match(text):
        raise SpecError(field, project_id, "a project ID: 6-30 lower-case letters, digits and hyphens, starting with a "
                        f"letter and not ending with a hyphen ({PROJECT_ID_PAGE})")
    return text
