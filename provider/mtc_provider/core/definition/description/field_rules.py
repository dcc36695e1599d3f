"""The rules the systems a run reaches apply to the fields a user sets, checked before any side effect (pure).

Kubernetes, JobSet, Kueue and the GCS FUSE CSI driver refuse (or silently drop) these values only when the object
reaches them: after the bucket, the IAM bindings and the node pools, or at the first mount. Each rule here is the
system's own; docs/field-rules.md lists every field with its rule and the source it was read from (apimachinery
validation, kubernetes `pkg/apis/core/validation`, JobSet's CRD and webhook, Kueue's `ValidateQueueName`, the GCS
FUSE CSI driver's `disallowedFlags`).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from mtc_provider.core.basics.errors import SpecError, require
from mtc_provider.core.basics.names import (DNS1123_LABEL_MAX, DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_RE,
                                            LABEL_VALUE_RE)

K8S_VALIDATION = "Kubernetes pkg/apis/core/validation/validation.go"
APIMACHINERY = "Kubernetes k8s.io/apimachinery pkg/util/validation"
JOBSET_CRD = "JobSet CRD (jobset.x-k8s.io_jobsets.yaml, v0.10.1 and v0.12.0)"
JOBSET_WEBHOOK = "JobSet's webhook (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go)"
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# IsQualifiedName: [prefix/]name, the name 1-63 of [-A-Za-z0-9_.] alphanumeric at both ends, the prefix a DNS
# subdomain of at most 253.
QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
QUALIFIED_NAME_ALLOWED = ("a Kubernetes label key ([prefix/]name: name 1-63 letters, digits, '-', '_' or '.', "
                          "alphanumeric at both ends; prefix a DNS subdomain of at most 253)")
LABEL_VALUE_ALLOWED = "a label value: at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
# IsConfigMapKey (Secret keys too): at most 253 of [-._a-zA-Z0-9], not '.' or '..', not starting with '..'.
CONFIG_MAP_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_MAP_KEY_MAX = 253

TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_OPERATORS = ("Exists", "Equal")  # "" is Equal
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MOUNT_PROPAGATIONS = ("None", "HostToContainer", "Bidirectional")
# core/v1 VolumeSource: a Volume names exactly one of these (an unknown key is dropped, and then no source is left).
VOLUME_SOURCES = frozenset({"hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret",
                            "nfs", "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder",
                            "cephfs", "flocker", "downwardAPI", "fc", "azureFile", "configMap", "vsphereVolume",
                            "quobyte", "azureDisk", "photonPersistentDisk", "projected", "portworxVolume", "scaleIO",
                            "storageos", "csi", "ephemeral", "image"})

# The JobSet CRD's enums and minimums for the fields an override can set (the failure policy is the provider's).
STARTUP_POLICY_ORDERS = ("AnyOrder", "InOrder")
SUCCESS_POLICY_OPERATORS = ("All", "Any")

# The gcs-fuse-csi-driver's sidecar mounter discards these flags (it sets them itself) and a boolean flag whose value
# is not true or false.
GCSFUSE_DISALLOWED = frozenset({"temp-dir", "config-file", "foreground", "log-file", "log-format", "key-file",
                                "token-url", "reuse-token-from-url", "o", "logging:log-rotate:max-file-size-mb",
                                "logging:log-rotate:backup-file-count", "logging:log-rotate:compress", "cache-dir",
                                "experimental-local-file-cache", "prometheus-port"})
GCSFUSE_BOOL_FLAGS = frozenset({"implicit-dirs", "enable-nonexistent-type-cache", "debug_fuse_errors", "debug_fuse",
                                "debug_fs", "debug_gcs", "debug_http", "debug_invariants", "debug_mutex",
                                "disable-autoconfig"})
GCSFUSE_SOURCE = "gcs-fuse-csi-driver pkg/sidecar_mounter/sidecar_mounter_config.go"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- names, keys and values (apimachinery) -----------------------------------------------------------------------


def check_qualified_name(where: str, key: Any, allowed: str = QUALIFIED_NAME_ALLOWED) -> str:
    """IsQualifiedName: what a label key, an annotation key and a toleration key must be."""
    prefix, _, name = key.rpartition("/") if isinstance(key, str) else ("", "", "")
    valid = (isinstance(key, str) and key.count("/") <= 1 and 0 < len(name) <= DNS1123_LABEL_MAX
             and bool(QUALIFIED_NAME_RE.match(name))
             and ("/" not in key or 0 < len(prefix) <= DNS1123_SUBDOMAIN_MAX
                  and bool(DNS1123_SUBDOMAIN_RE.match(prefix))))
    require(valid, where, key, f"{allowed} ({APIMACHINERY}, IsQualifiedName)")
    return key


def check_label_value(where: str, value: Any) -> str:
    require(isinstance(value, str) and len(value) <= DNS1123_LABEL_MAX and bool(LABEL_VALUE_RE.match(value)),
            where, value, f"{LABEL_VALUE_ALLOWED} ({APIMACHINERY}, IsValidLabelValue)")
    return value


def check_labels(where: str, labels: Any) -> None:
    require(isinstance(labels, Mapping), where, labels, "a mapping of label keys to label values")
    for key, value in labels.items():
        check_qualified_name(f"{where}.{key}", key)
        check_label_value(f"{where}.{key}", value)


def check_annotations(where: str, annotations: Any) -> None:
    require(isinstance(annotations, Mapping), where, annotations, "a mapping of annotation keys to strings")
    for key, value in annotations.items():
        check_qualified_name(f"{where}.{key}", key, "an annotation key ([prefix/]name, as a label key)")
        require(isinstance(value, str), f"{where}.{key}", value, "a string (quote numbers and booleans in YAML)")


def check_config_map_key(where: str, key: Any) -> str:
    """IsConfigMapKey: a key of a Secret or a ConfigMap."""
    require(isinstance(key, str) and 0 < len(key) <= CONFIG_MAP_KEY_MAX and bool(CONFIG_MAP_KEY_RE.match(key))
            and key not in (".", "..") and not key.startswith(".."), where, key,
            f"a Secret/ConfigMap key: 1-{CONFIG_MAP_KEY_MAX} letters, digits, '-', '_' or '.', not '.' or '..' and "
            f"not starting with '..' ({APIMACHINERY}, IsConfigMapKey)")
    return key


def check_kueue_name(where: str, value: Any) -> str:
    """A Kueue object named in a label (LocalQueue, WorkloadPriorityClass): a DNS subdomain that fits a label value."""
    require(isinstance(value, str) and 0 < len(value) <= DNS1123_LABEL_MAX and bool(DNS1123_SUBDOMAIN_RE.match(value)),
            where, value, "a label value that is also a DNS subdomain: at most 63 lower-case letters, digits, '-' "
            "and '.', alphanumeric at both ends (Kueue pkg/controller/jobframework/validation.go, "
            "ValidateQueueName; Kueue objects are named by DNS subdomains)")
    return value


# --- pod template parts (core/v1 validation) ----------------------------------------------------------------------


def check_toleration(where: str, toleration: Mapping[str, Any]) -> None:
    """ValidateTolerations, field by field, in its order."""
    unknown = set(toleration) - set(TOLERATION_FIELDS)
    require(not unknown, where, sorted(unknown), f"Toleration fields: {', '.join(TOLERATION_FIELDS)}")
    key = toleration.get("key", "")
    operator = toleration.get("operator", "")
    value = toleration.get("value", "")
    effect = toleration.get("effect", "")
    source = f"{K8S_VALIDATION}, ValidateTolerations"
    if key != "":
        check_qualified_name(f"{where}.key", key, "a taint key (a Kubernetes label key, [prefix/]name)")
    require(operator in ("", *TOLERATION_OPERATORS), f"{where}.operator", operator,
            f"Exists or Equal (empty means Equal) ({source})")
    require(key != "" or operator == "Exists", f"{where}.operator", operator,
            f"Exists when key is empty (an empty key with Exists matches every taint; {source})")
    if "tolerationSeconds" in toleration:
        seconds = toleration["tolerationSeconds"]
        require(_is_int(seconds) and -INT64_MAX - 1 <= seconds <= INT64_MAX, f"{where}.tolerationSeconds", seconds,
                "an integer number of seconds (int64)")
        require(effect == "NoExecute", f"{where}.effect", effect or None,
                f"NoExecute when tolerationSeconds is set: tolerationSeconds only applies to NoExecute taints "
                f"({source})")
    if operator == "Exists":
        require(value in ("", None), f"{where}.value", value, f"empty when operator is Exists ({source})")
    else:
        check_label_value(f"{where}.value", value)
    require(effect in ("", *TAINT_EFFECTS), f"{where}.effect", effect,
            f"{', '.join(TAINT_EFFECTS)} or empty (every effect) ({source})")


def check_descending_path(where: str, path: Any) -> str:
    """validateLocalDescendingPath: a relative path with no '..' element (subPath, subPathExpr)."""
    source = f"{K8S_VALIDATION}, validateLocalDescendingPath"
    require(isinstance(path, str), where, path, "a relative path (a string)")
    require(not path.startswith("/"), where, path, f"a relative path inside the volume, not an absolute one ({source})")
    require(".." not in path.replace("\\", "/").split("/"), where, path,
            f"a path with no '..' element: it must stay inside the volume ({source})")
    return path


def check_volume_mount(where: str, mount: Mapping[str, Any]) -> None:
    """ValidateVolumeMounts for what a user's mount can get wrong beyond its name and mountPath."""
    source = f"{K8S_VALIDATION}, ValidateVolumeMounts"
    if mount.get("subPath"):
        check_descending_path(f"{where}.subPath", mount["subPath"])
    if mount.get("subPathExpr"):
        require(not mount.get("subPath"), f"{where}.subPathExpr", mount["subPathExpr"],
                f"empty when subPath is set: subPath and subPathExpr are mutually exclusive ({source})")
        check_descending_path(f"{where}.subPathExpr", mount["subPathExpr"])
    if "mountPropagation" in mount:
        require(mount["mountPropagation"] in MOUNT_PROPAGATIONS, f"{where}.mountPropagation",
                mount["mountPropagation"], f"one of {', '.join(MOUNT_PROPAGATIONS)} ({source}, "
                "validateMountPropagation)")
    if "readOnly" in mount:
        require(isinstance(mount["readOnly"], bool), f"{where}.readOnly", mount["readOnly"], "true or false")


def check_volume_source(where: str, volume: Mapping[str, Any]) -> None:
    for key in volume:
        if key != "name":
            require(key in VOLUME_SOURCES, f"{where}.{key}", volume[key],
                    f"a Kubernetes volume source: one of {', '.join(sorted(VOLUME_SOURCES))} (the API server drops an "
                    f"unknown key and then refuses a volume with no source; {K8S_VALIDATION}, validateVolumeSource)")


def check_node_selector(where: str, selector: Any) -> None:
    require(isinstance(selector, Mapping), where, selector, "a mapping of node label keys to values")
    for key, value in selector.items():
        check_qualified_name(f"{where}.{key}", key)
        check_label_value(f"{where}.{key}", value)


def check_pod_template_override(where: str, override: Mapping[str, Any]) -> None:
    """The parts of a pod template override that the rules above cover, wherever they are set."""
    _check_metadata(where, override)
    spec = override.get("spec") or {}
    if "nodeSelector" in spec:
        check_node_selector(f"{where}.spec.nodeSelector", spec["nodeSelector"])
    for i, toleration in enumerate(_list(f"{where}.spec.tolerations", spec.get("tolerations", []))):
        check_toleration(f"{where}.spec.tolerations[{i}]", toleration)


def _check_metadata(where: str, override: Mapping[str, Any]) -> None:
    """An override's own labels and annotations."""
    metadata = override.get("metadata") or {}
    if "labels" in metadata:
        check_labels(f"{where}.metadata.labels", metadata["labels"])
    if "annotations" in metadata:
        check_annotations(f"{where}.metadata.annotations", metadata["annotations"])


def _list(where: str, value: Any) -> list[Mapping[str, Any]]:
    require(isinstance(value, list) and all(isinstance(item, Mapping) for item in value), where, value,
            "a list of mappings")
    return value


# --- JobSet (CRD schema and webhook) ------------------------------------------------------------------------------


def check_jobset_override(where: str, override: Mapping[str, Any]) -> None:
    """The JobSet fields an override can set, against the CRD's enums and minimums and the webhook's own rules."""
    _check_metadata(where, override)
    spec = override.get("spec") or {}
    at = f"{where}.spec"
    startup = spec.get("startupPolicy") or {}
    if "startupPolicyOrder" in startup:
        require(startup["startupPolicyOrder"] in STARTUP_POLICY_ORDERS, f"{at}.startupPolicy.startupPolicyOrder",
                startup["startupPolicyOrder"], f"{' or '.join(STARTUP_POLICY_ORDERS)} ({JOBSET_CRD}, enum)")
    success = spec.get("successPolicy") or {}
    if "operator" in success:
        require(success["operator"] in SUCCESS_POLICY_OPERATORS, f"{at}.successPolicy.operator", success["operator"],
                f"{' or '.join(SUCCESS_POLICY_OPERATORS)} ({JOBSET_CRD}, enum)")
    if "ttlSecondsAfterFinished" in spec:
        ttl = spec["ttlSecondsAfterFinished"]
        require(_is_int(ttl) and 0 <= ttl <= INT32_MAX, f"{at}.ttlSecondsAfterFinished", ttl,
                f"an integer >= 0 and <= {INT32_MAX} ({JOBSET_CRD}: minimum 0, int32)")
    if "suspend" in spec:
        require(isinstance(spec["suspend"], bool), f"{at}.suspend", spec["suspend"], "true or false")
    subdomain = (spec.get("network") or {}).get("subdomain")
    if subdomain is not None:
        # The webhook: a DNS subdomain, and a DNS-1035 label too (it names a Service).
        require(isinstance(subdomain, str) and len(subdomain) <= DNS1123_LABEL_MAX
                and bool(re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", subdomain)), f"{at}.network.subdomain", subdomain,
                f"a DNS-1035 label: at most 63 lower-case letters, digits and '-', starting with a letter and ending "
                f"with a letter or digit ({JOBSET_WEBHOOK}: it names the headless Service)")


def check_override_targets(where: str, override: Mapping[str, Any], replicated_jobs: Iterable[str]) -> None:
    """The webhook: `successPolicy.targetReplicatedJobs` names replicated jobs of this JobSet."""
    names = list(replicated_jobs)
    targets = ((override.get("spec") or {}).get("successPolicy") or {}).get("targetReplicatedJobs")
    if targets is None:
        return
    require(isinstance(targets, list), f"{where}.spec.successPolicy.targetReplicatedJobs", targets, "a list of names")
    for i, name in enumerate(targets):
        require(name in names, f"{where}.spec.successPolicy.targetReplicatedJobs[{i}]", name,
                f"a replicated job of this JobSet: {', '.join(names)} ({JOBSET_WEBHOOK}: \"does not appear in "
                ".spec.ReplicatedJobs\")")


# --- gcsfuse mount options -----------------------------------------------------------------------------------------


def check_gcsfuse_option(where: str, option: str) -> str:
    """An option the GCS FUSE CSI driver passes to gcsfuse (it discards the others, and the mount goes on without)."""
    if ":" in option and "https" not in option:  # a config-file option, `section:key:value`
        flag, value = option.rsplit(":", 1)
    else:
        flag, _, value = option.partition("=")
    if flag in GCSFUSE_DISALLOWED or flag.startswith("logging:log-rotate:"):
        raise SpecError(where, option, f"an option the GCS FUSE CSI driver does not set itself: it discards "
                        f"{', '.join(sorted(GCSFUSE_DISALLOWED))} ({GCSFUSE_SOURCE}, disallowedFlags)")
    if flag in GCSFUSE_BOOL_FLAGS and "=" in option:
        require(value in ("true", "false"), where, option,
                f"{flag}, {flag}=true or {flag}=false: the driver discards another value ({GCSFUSE_SOURCE}, boolFlags)")
    return option
