"""What a real cluster needs on a JobSet beyond training: queue, priority, capacity, volumes, secrets, overrides.

Validated like every other input (each error names the field, the value and what is allowed) and applied to
the rendered JobSet by `apply_customization`. Secrets are only ever referenced (`secretKeyRef`, `secretRef`):
no secret value can enter a manifest, an XCom or a template field because the spec has no field for one.

Capacity follows GKE's documentation for TPU node pools:
- Spot: nodes of Spot node pools carry the label `cloud.google.com/gke-spot: "true"`; a workload selects them
  with that nodeSelector and tolerates the `cloud.google.com/gke-spot=true:NoSchedule` taint GKE puts on them
  (https://cloud.google.com/kubernetes-engine/docs/how-to/spot-vms,
  https://cloud.google.com/kubernetes-engine/docs/how-to/tpus "Run your workload on Spot VMs").
- Reservation: a workload consumes a specific reservation with the nodeSelectors
  `cloud.google.com/reservation-name: NAME` and `cloud.google.com/reservation-affinity: "specific"`
  (https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations); a shared reservation and a
  reservation block add their own labels (core.definition.shape.reservations).
Kueue admits a JobSet that carries `kueue.x-k8s.io/queue-name` (a LocalQueue) and orders it by the
WorkloadPriorityClass named in `kueue.x-k8s.io/priority-class` (https://kueue.sigs.k8s.io/docs/tasks/run/jobsets/,
https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/).

The overrides merge like kubectl's strategic merge patch for the lists that have a merge key (containers, env,
volumes by name; volumeMounts by mountPath; replicatedJobs by name); other lists are replaced. They may not
change what the provider owns (see `core.definition.render.jobset_manifest.provider_owned`): the MTC volume, the failure policies, the
checkpoint flags, the TPU shape and the run labels that reattaching relies on.
"""

from __future__ import annotations

import copy
import posixpath
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from mtc_provider.core.basics.errors import SpecError, require
from mtc_provider.core.basics.names import check_dns1123_label, check_dns1123_subdomain
from mtc_provider.core.definition.description import field_rules
from mtc_provider.core.definition.shape.reservations import parse_reservation

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
SPOT_LABEL = "cloud.google.com/gke-spot"
# GKE's labels on Spot and preemptible nodes: `capacity` selects them, together with the node pools it creates and
# the pools readiness counts; a raw selector of its own would select nodes no pool of the run has.
CAPACITY_SELECTOR_LABELS = (SPOT_LABEL, "cloud.google.com/gke-preemptible")
CAPACITIES = ("on-demand", "spot", "reservation")
SHM_VOLUME_NAME = "dshm"
SHM_PATH = "/dev/shm"
# Kubernetes resource.Quantity (binary and decimal suffixes), e.g. 16Gi, 512Mi, 1e9.
QUANTITY_RE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE][0-9]+)?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Merge keys of kubectl's strategic merge patch for the lists a JobSet's pod template has.
MERGE_KEYS = {"replicatedJobs": "name", "containers": "name", "initContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath", "imagePullSecrets": "name"}


def _mapping(section: str, value: Any) -> Mapping[str, Any]:
    require(isinstance(value, Mapping), section, value, "a mapping")
    return value


def _items(section: str, value: Any) -> tuple[Mapping[str, Any], ...]:
    require(isinstance(value, (list, tuple)), section, value, "a list of mappings")
    for i, item in enumerate(value):
        require(isinstance(item, Mapping), f"{section}[{i}]", item, "a mapping")
    return tuple(dict(item) for item in value)


@dataclass(frozen=True)
class CustomizationSpec:
    """JobSet customization for real clusters; every field is optional and off by default.

    queue_name: the Kueue LocalQueue (label `kueue.x-k8s.io/queue-name` on the JobSet).
    kueue_priority_class: a Kueue WorkloadPriorityClass (label `kueue.x-k8s.io/priority-class`).
    priority_class_name: a Kubernetes PriorityClass for the pods (`priorityClassName`).
    capacity: on-demand, spot or reservation (GKE's node selectors and tolerations for TPU node pools).
    reservation: the reservation's name when capacity is reservation.
    node_selector: extra node labels the pods require (the TPU accelerator and topology are the provider's).
    tolerations: extra tolerations (Kubernetes Toleration objects).
    volumes, volume_mounts: extra pod volumes (Kubernetes Volume objects) and the training container's mounts.
    secret_env: env var name -> {secret, key}: the value comes from a Secret (`secretKeyRef`), never inline.
    config_map_env: env var name -> {config_map, key} (`configMapKeyRef`).
    env_from_secrets, env_from_config_maps: Secrets / ConfigMaps whose every key becomes an env var (`envFrom`).
    shm_size: a memory-backed /dev/shm of this size (e.g. 16Gi); empty keeps the container runtime's small default.
    pod_template_override: a partial pod template merged into every pod template.
    jobset_override: a partial JobSet merged into the rendered one (like KubernetesJobOperator's full_job_spec).
    """

    queue_name: str = ""
    kueue_priority_class: str = ""
    priority_class_name: str = ""
    capacity: str = "on-demand"
    reservation: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    volumes: tuple[Mapping[str, Any], ...] = ()
    volume_mounts: tuple[Mapping[str, Any], ...] = ()
    secret_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    config_map_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    env_from_secrets: tuple[str, ...] = ()
    env_from_config_maps: tuple[str, ...] = ()
    shm_size: str = ""
    pod_template_override: Mapping[str, Any] = field(default_factory=dict)
    jobset_override: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = "customization"
        if self.queue_name:
            field_rules.check_kueue_name(f"{s}.queue_name", self.queue_name)
        if self.kueue_priority_class:
            field_rules.check_kueue_name(f"{s}.kueue_priority_class", self.kueue_priority_class)
        if self.priority_class_name != "":  # a PriorityClass's name: a DNS subdomain
            check_dns1123_subdomain(f"{s}.priority_class_name", self.priority_class_name)
        require(self.capacity in CAPACITIES, f"{s}.capacity", self.capacity, ", ".join(CAPACITIES))
        if self.capacity == "reservation":
            require(bool(self.reservation), f"{s}.reservation", self.reservation,
                    "the reservation's name when capacity is reservation")
        require(not self.reservation or self.capacity == "reservation", f"{s}.reservation", self.reservation,
                "empty unless capacity is reservation")
        if self.reservation:
            parse_reservation(f"{s}.reservation", self.reservation)
        field_rules.check_node_selector(f"{s}.node_selector", self.node_selector)
        for key in CAPACITY_SELECTOR_LABELS:
            require(key not in self.node_selector, f"{s}.node_selector.{key}", self.node_selector.get(key),
                    f"no {key} selector of its own: customization.capacity (here {self.capacity}) selects the nodes' "
                    "capacity, and the node pools created and counted by readiness follow it; for Spot nodes set "
                    "capacity: spot and leave the label out")
        object.__setattr__(self, "tolerations", _items(f"{s}.tolerations", self.tolerations))
        for i, toleration in enumerate(self.tolerations):
            field_rules.check_toleration(f"{s}.tolerations[{i}]", toleration)
        object.__setattr__(self, "volumes", _items(f"{s}.volumes", self.volumes))
        object.__setattr__(self, "volume_mounts", _items(f"{s}.volume_mounts", self.volume_mounts))
        self._check_volumes(s)
        self._check_env(s)
        require(self.shm_size == "" or (isinstance(self.shm_size, str) and bool(QUANTITY_RE.match(self.shm_size))),
                f"{s}.shm_size", self.shm_size, "a Kubernetes quantity such as 16Gi or 512Mi, or empty")
        for name in ("pod_template_override", "jobset_override"):
            _check_override(f"{s}.{name}", getattr(self, name))
        field_rules.check_pod_template_override(f"{s}.pod_template_override", self.pod_template_override)
        field_rules.check_jobset_override(f"{s}.jobset_override", self.jobset_override)

    def _check_volumes(self, s: str) -> None:
        names: list[str] = []
        for i, volume in enumerate(self.volumes):
            name = volume.get("name")
            check_dns1123_label(f"{s}.volumes[{i}].name", name)
            sources = [key for key in volume if key != "name"]
            require(len(sources) == 1 and isinstance(volume[sources[0]], Mapping), f"{s}.volumes[{i}]", dict(volume),
                    "a Kubernetes Volume: a name and exactly one source (secret, configMap, persistentVolumeClaim, ...)")
            field_rules.check_volume_source(f"{s}.volumes[{i}]", volume)
            require(name not in names, f"{s}.volumes[{i}].name", name, "a name used once")
            names.append(name)
        paths: list[str] = []
        for i, mount in enumerate(self.volume_mounts):
            require(mount.get("name") in names,
                    f"{s}.volume_mounts[{i}].name", mount.get("name"), f"one of the volumes ({', '.join(names) or 'none'})")
            path = mount.get("mountPath")
            require(isinstance(path, str) and path.startswith("/") and posixpath.normpath(path) != "/",
                    f"{s}.volume_mounts[{i}].mountPath", path, "an absolute path other than '/'")
            require(path not in paths, f"{s}.volume_mounts[{i}].mountPath", path, "a path mounted once")
            require(not (self.shm_size and posixpath.normpath(path) == SHM_PATH), f"{s}.volume_mounts[{i}].mountPath",
                    path, f"a path other than {SHM_PATH} (shm_size mounts it)")
            unknown = set(mount) - {"name", "mountPath", "readOnly", "subPath", "subPathExpr", "mountPropagation"}
            require(not unknown, f"{s}.volume_mounts[{i}]", sorted(unknown),
                    "VolumeMount fields: name, mountPath, readOnly, subPath, subPathExpr, mountPropagation")
            field_rules.check_volume_mount(f"{s}.volume_mounts[{i}]", mount)
            paths.append(path)

    def _check_env(self, s: str) -> None:
        refs = (("secret_env", "secret"), ("config_map_env", "config_map"))
        seen: set[str] = set()
        for attr, source in refs:
            for name, ref in _mapping(f"{s}.{attr}", getattr(self, attr)).items():
                where = f"{s}.{attr}.{name}"
                require(isinstance(name, str) and bool(ENV_NAME_RE.match(name)), where, name,
                        "an environment variable name: letters, digits and '_', not starting with a digit")
                require(name not in seen, where, name, "a variable set once across secret_env and config_map_env")
                seen.add(name)
                require(isinstance(ref, Mapping) and set(ref) == {source, "key"}, where, ref,
                        f"a reference {{{source}: NAME, key: KEY}} (never the value itself)")
                check_dns1123_subdomain(f"{where}.{source}", ref[source])  # Secret and ConfigMap names
                field_rules.check_config_map_key(f"{where}.key", ref["key"])
        for attr in ("env_from_secrets", "env_from_config_maps"):
            value = getattr(self, attr)
            require(isinstance(value, (list, tuple)), f"{s}.{attr}", value, "a list of names")
            for i, name in enumerate(value):
                check_dns1123_subdomain(f"{s}.{attr}[{i}]", name)
            object.__setattr__(self, attr, tuple(value))

    @classmethod
    def from_value(cls, value: Any, section: str = "customization") -> "CustomizationSpec":
        """A CustomizationSpec from itself, None (nothing customized) or a mapping of its fields (DAG params)."""
        if value is None or isinstance(value, cls):
            return value or cls()
        require(isinstance(value, Mapping), section, value, "a mapping of customization fields")
        known = {f.name for f in fields(cls)}
        for key in value:
            require(key in known, f"{section}.{key}", value[key], f"one of {', '.join(sorted(known))}")
        return cls(**dict(value))

    @property
    def is_empty(self) -> bool:
        return self == CustomizationSpec()


def _check_override(where: str, override: Any) -> None:
    require(isinstance(override, Mapping), where, override, "a mapping (a partial manifest)")
    allowed = {"metadata", "spec"}
    for key in override:
        require(key in allowed, f"{where}.{key}", override[key], "metadata or spec (kind and apiVersion are fixed)")

    def walk(node: Any, path: str) -> None:
        if node is None:
            raise SpecError(path, None, "a value (an override merges; it cannot delete a field)")
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(override, where)


# --- applying ----------------------------------------------------------------------------------------


def merge(base: Any, override: Any) -> Any:
    """A copy of base with override merged in: mappings recursively, keyed lists by their merge key."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        merged = {key: copy.deepcopy(value) for key, value in base.items()}
        for key, value in override.items():
            merge_key = MERGE_KEYS.get(key)
            if merge_key and isinstance(value, list) and isinstance(merged.get(key), list):
                merged[key] = _merge_list(merged[key], value, merge_key)
            else:
                merged[key] = merge(merged[key], value) if key in merged else copy.deepcopy(value)
        return merged
    return copy.deepcopy(override)


def _merge_list(base: list[Any], override: list[Any], key: str) -> list[Any]:
    merged = [copy.deepcopy(item) for item in base]
    for item in override:
        match = next((i for i, old in enumerate(merged) if isinstance(old, Mapping) and isinstance(item, Mapping)
                      and key in item and old.get(key) == item[key]), None)
        if match is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[match] = merge(merged[match], item)
    return merged


def pod_templates(jobset: dict[str, Any]) -> list[dict[str, Any]]:
    return [job["template"]["spec"]["template"] for job in jobset["spec"]["replicatedJobs"]]


def apply_customization(jobset: dict[str, Any], custom: CustomizationSpec, container_name: str,
                        provider_owned: Callable[[Mapping[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """The JobSet with the customization applied; refused (SpecError) when it changes a provider-owned field."""
    if custom.is_empty:
        return jobset
    owned_before = provider_owned(jobset)
    result = copy.deepcopy(jobset)
    labels = {}
    if custom.queue_name:
        labels[QUEUE_NAME_LABEL] = custom.queue_name
    if custom.kueue_priority_class:
        labels[KUEUE_PRIORITY_CLASS_LABEL] = custom.kueue_priority_class
    result["metadata"].setdefault("labels", {}).update(labels)
    for template in pod_templates(result):
        _customize_pod(template["spec"], custom, container_name)
    for template in pod_templates(result):
        template.update(merge(template, custom.pod_template_override))
    _refuse_changes(owned_before, provider_owned(result), "customization.pod_template_override")
    result = merge(result, custom.jobset_override)
    _refuse_changes(owned_before, provider_owned(result), "customization.jobset_override")
    return result


def _refuse_changes(before: dict[str, Any], after: dict[str, Any], where: str) -> None:
    for path, value in before.items():
        if after.get(path) != value:
            raise SpecError(f"{where}: {path}", after.get(path),
                            f"the provider's value {value!r}: this field is owned by the provider (MTC volume, failure "
                            "policies, checkpoint flags, TPU shape and run labels); change the spec instead")


def _add_unique(where: str, items: list[dict[str, Any]], new: Mapping[str, Any], key: str) -> None:
    require(all(item.get(key) != new[key] for item in items), where, new[key],
            f"a {key} the provider does not already use ({', '.join(str(i.get(key)) for i in items)})")
    items.append(dict(new))


def _customize_pod(pod: dict[str, Any], custom: CustomizationSpec, container_name: str) -> None:
    s = "customization"
    container = next(c for c in pod["containers"] if c["name"] == container_name)
    selector = pod.setdefault("nodeSelector", {})
    tolerations = pod.setdefault("tolerations", [])
    extra_selector = dict(custom.node_selector)
    if custom.capacity == "spot":
        extra_selector[SPOT_LABEL] = "true"
        tolerations.append({"key": SPOT_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    elif custom.capacity == "reservation":  # a shared reservation or a block: several labels (core.definition.shape.reservations)
        extra_selector.update(parse_reservation(f"{s}.reservation", custom.reservation).node_selector)
    for key, value in extra_selector.items():
        require(key not in selector or selector[key] == value, f"{s}.node_selector.{key}", value,
                f"a label the provider does not set ({', '.join(selector)})")
        selector[key] = value
    tolerations.extend(dict(t) for t in custom.tolerations)
    if custom.priority_class_name:
        pod["priorityClassName"] = custom.priority_class_name
    volumes = pod.setdefault("volumes", [])
    mounts = container.setdefault("volumeMounts", [])
    if custom.shm_size:
        _add_unique(f"{s}.shm_size", volumes,
                    {"name": SHM_VOLUME_NAME, "emptyDir": {"medium": "Memory", "sizeLimit": custom.shm_size}}, "name")
        _add_unique(f"{s}.shm_size", mounts, {"name": SHM_VOLUME_NAME, "mountPath": SHM_PATH}, "mountPath")
    for i, volume in enumerate(custom.volumes):
        _add_unique(f"{s}.volumes[{i}].name", volumes, volume, "name")
    for i, mount in enumerate(custom.volume_mounts):
        _add_unique(f"{s}.volume_mounts[{i}].mountPath", mounts, mount, "mountPath")
    env = container.setdefault("env", [])
    for name, ref in custom.secret_env.items():
        _add_unique(f"{s}.secret_env.{name}", env,
                    {"name": name, "valueFrom": {"secretKeyRef": {"name": ref["secret"], "key": ref["key"]}}}, "name")
    for name, ref in custom.config_map_env.items():
        _add_unique(f"{s}.config_map_env.{name}", env,
                    {"name": name, "valueFrom": {"configMapKeyRef": {"name": ref["config_map"], "key": ref["key"]}}},
                    "name")
    env_from = [{"secretRef": {"name": name}} for name in custom.env_from_secrets]
    env_from += [{"configMapRef": {"name": name}} for name in custom.env_from_config_maps]
    if env_from:
        container.setdefault("envFrom", []).extend(env_from)
    for key in ("volumes", "tolerations"):  # keep the rendered shape when nothing was added
        if not pod[key]:
            del pod[key]
    if not container["volumeMounts"]:
        del container["volumeMounts"]
