"""DNS-1123 name checks for the Kubernetes objects the provider creates.

Limits keep derived names valid: the Job name `<jobset>-<replicatedJob>-<jobIndex>` becomes a label value (63).
JobSet's webhook also bounds the pod names `<jobset>-<replicatedJob>-<jobIndex>-<completionIndex>-<5 random chars>`
to DNS-1035 labels (63): that check needs the slice shape, and lives in core.definition.description.jobset_names.
"""

from __future__ import annotations

import hashlib
import re

from mtc_provider.core.basics.errors import SpecError

DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX = 63
# Kubernetes "Object Names and IDs" (kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-subdomain-
# names): most resource names, ServiceAccounts' and custom resources' among them, are DNS subdomains (RFC 1123):
# labels joined by '.', at most 253 characters in all.
DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_SUBDOMAIN_MAX = 253
# Room for "-<replicatedJob>-<job index>" in the Job name label; pod names: core.definition.description.jobset_names.
JOBSET_NAME_MAX = 40
REPLICATED_JOB_NAME_MAX = 15
RUN_NAME_MAX = 63
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_ALLOWED = "lower-case letters, digits and '-', starting and ending with a letter or digit"


def _check_name(field: str, value: str, max_length: int, pattern: re.Pattern, allowed: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(field, value, f"a non-empty name of {allowed}, at most {max_length} characters")
    if len(value) > max_length:
        raise SpecError(field, value, f"at most {max_length} characters ({len(value)} given)")
    if not pattern.match(value):
        raise SpecError(field, value, f"{allowed}, at most {max_length} characters")
    return value


def check_dns1123_label(field: str, value: str, max_length: int = DNS1123_LABEL_MAX) -> str:
    return _check_name(field, value, max_length, DNS1123_LABEL_RE, _ALLOWED)


_SUBDOMAIN_ALLOWED = ("lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, each "
                      "'.'-separated part too (a DNS subdomain, RFC 1123)")


def check_dns1123_subdomain(field: str, value: str, max_length: int = DNS1123_SUBDOMAIN_MAX) -> str:
    return _check_name(field, value, max_length, DNS1123_SUBDOMAIN_RE, _SUBDOMAIN_ALLOWED)


def check_jobset_name(value: str, field: str = "workload.jobset_name") -> str:
    return check_dns1123_label(field, value, JOBSET_NAME_MAX)


def check_namespace(value: str, field: str = "workload.namespace") -> str:
    return check_dns1123_label(field, value, DNS1123_LABEL_MAX)


def check_service_account(value: str, field: str = "workload.service_account") -> str:
    """A ServiceAccount's name is a DNS subdomain (Kubernetes "Configure Service Accounts for Pods": "The name of a
    ServiceAccount object must be a valid DNS subdomain name"), dots allowed."""
    return check_dns1123_subdomain(field, value)


def check_checkpoint_configuration_name(value: str, field: str = "checkpoint_configuration.name") -> str:
    """A custom resource's name is a DNS subdomain (Kubernetes "Custom Resources"; the API server validates it so),
    dots allowed."""
    return check_dns1123_subdomain(field, value)


# GKE's names: Container API, `Cluster.name` ("up to 40 characters ... Lowercase letters, numbers, and hyphens only.
# Must start with a letter. Must end with a number or a letter.", google-cloud-container `container_v1.types.Cluster`)
# and a node pool's name, which the API checks against '(?:[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?)' ("only lowercase
# alphanumerics and '-' allowed, must start with a letter and end with an alphanumeric, and must be no longer than
# 40 characters", the Container API's 400 for `node_pool.name`). A DNS label may start with a digit; these may not.
GKE_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
GKE_NAME_MAX = 40
_GKE_ALLOWED = "lower-case letters, digits and '-', starting with a letter and ending with a letter or digit (GKE)"
# Node pools are named <prefix>-<slice index>: room for "-" and a three-digit index.
NODE_POOL_PREFIX_MAX = GKE_NAME_MAX - 4


def check_gke_name(field: str, value: str, max_length: int = GKE_NAME_MAX) -> str:
    """A GKE cluster's or node pool's name."""
    return _check_name(field, value, max_length, GKE_NAME_RE, _GKE_ALLOWED)


def check_node_pool_prefix(value: str, field: str = "node_pool_prefix") -> str:
    """The prefix of the node pools `<prefix>-<i>`: each must be a GKE node pool name."""
    return check_gke_name(field, value, NODE_POOL_PREFIX_MAX)


def check_run_name(value: str, field: str = "checkpointing.run_name") -> str:
    """The run name is a directory under base_output_directory and a label value: keep it DNS-1123."""
    return check_dns1123_label(field, value, RUN_NAME_MAX)


def label_value(text: str) -> str:
    """Turn any text (an Airflow run id, say) into a valid label value, stable for the same input.

    Text that is already a valid value of at most 63 characters is kept as is. Anything else (too long, or with
    characters a label value cannot hold) is cut and given an 8-hex hash of the whole text, so two long ids that
    share their first 63 characters (or differ only in a replaced character) never share a label value.
    """
    text = str(text)
    if text and len(text) <= DNS1123_LABEL_MAX and LABEL_VALUE_RE.match(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[: DNS1123_LABEL_MAX - len(digest) - 1].strip("_.-")
    return f"{cleaned}-{digest}" if cleaned else digest
