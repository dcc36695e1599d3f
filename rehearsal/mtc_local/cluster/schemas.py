"""Validation as the API server does it: object names, then the CRD's openAPIV3Schema (jsonschema), 422 on failure.

- Names of custom resources must be DNS-1123 subdomains
  (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-subdomain-names).
- A custom object must match its CRD's structural schema
  (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation);
  messages are worded as apiextensions-apiserver words them (`<field>: Invalid value: ...`, `Required value`,
  `Unsupported value`), causes carry the field path.
- With `fieldValidation=Strict` an unknown field is 400 BadRequest `strict decoding error: unknown field "..."`
  (https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation); otherwise it is pruned silently.
The CRDs are the upstream files in ./crds (see crds/README.md).
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

from mtc_local.cluster import errors
from mtc_local.cluster.resources import CHECKPOINT_CONFIGURATIONS, JOBSETS, Resource

CRD_DIR = Path(__file__).with_name("crds")
CRD_FILES = {JOBSETS.plural: "jobset-crd-v0.12.0.yaml", CHECKPOINT_CONFIGURATIONS.plural: "checkpointconfiguration-crd.yaml"}
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_HELP = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                   "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                   "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def _strict(schema: Any) -> Any:
    """The schema with unknown fields rejected where the CRD does not keep them (x-kubernetes-preserve-unknown-fields)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (out.get("type") == "object" and "properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.lru_cache(maxsize=None)
def _crd(plural: str) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the JobSet CRD is ~10,000 lines
    return yaml.load((CRD_DIR / CRD_FILES[plural]).read_text(), Loader=loader)


def served_crd(name: str) -> dict[str, Any] | None:
    """`GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/<name>`: the CRD as installed, None if none."""
    found = next((plural for plural in CRD_FILES if _crd(plural)["metadata"]["name"] == name), None)
    return copy.deepcopy(_crd(found)) if found else None


def openapi_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """The served version's openAPIV3Schema, with the fields every object has (metadata is never pruned)."""
    version = next(v for v in crd["spec"]["versions"] if v.get("served", True))
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    for key, kind in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object")):
        schema.setdefault("properties", {}).setdefault(key, {"type": kind})
    schema["properties"]["metadata"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return schema


@functools.lru_cache(maxsize=None)
def crd_schema(plural: str) -> dict[str, Any]:
    return openapi_schema(_crd(plural))


def strict_validator(schema: dict[str, Any]) -> Any:
    """A validator that reports the fields `schema` neither declares nor preserves (build once: it is not cheap)."""
    import jsonschema

    return jsonschema.Draft7Validator(_strict(schema))


def unknown_field(validator: Any, obj: dict[str, Any]) -> str | None:
    """The first field of `obj` a `strict_validator` finds undeclared (what strict field validation refuses), as
    the API server names it (`spec.a.b`), or None."""
    found = [e for e in validator.iter_errors(obj) if e.validator == "additionalProperties"]
    if not found:
        return None
    extra = re.findall(r"'([^']+)' was unexpected", found[0].message) or ["?"]
    where = _field(found[0].absolute_path)
    return f"{where + '.' if where else ''}{extra[0]}"


def pruned(schema: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of `obj` without the fields `schema` does not declare, as the API server stores a custom object."""
    return _prune(copy.deepcopy(obj), schema)


@functools.lru_cache(maxsize=None)
def _validator(plural: str, strict: bool) -> Any:
    import jsonschema

    schema = crd_schema(plural)
    return strict_validator(schema) if strict else jsonschema.Draft7Validator(schema)


def _field(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _cause(error: Any) -> dict[str, str]:
    """One jsonschema error as an API server cause (reason, field, message)."""
    field = _field(error.absolute_path)
    if error.validator == "required":
        missing = re.match(r"'([^']+)'", error.message)
        name = missing.group(1) if missing else "?"
        return {"reason": "FieldValueRequired", "message": "Required value",
                "field": f"{field}.{name}" if field else name}
    if error.validator == "enum":
        allowed = ", ".join(_value(v) for v in error.validator_value)
        return {"reason": "FieldValueNotSupported", "field": field,
                "message": f"Unsupported value: {_value(error.instance)}: supported values: {allowed}"}
    if error.validator == "type":
        detail = f"{field} in body must be of type {error.validator_value}: {_value(error.instance)}"
    elif error.validator in ("minimum", "exclusiveMinimum"):
        detail = f"{field} in body should be greater than or equal to {error.validator_value}"
    elif error.validator in ("maximum", "exclusiveMaximum"):
        detail = f"{field} in body should be less than or equal to {error.validator_value}"
    elif error.validator == "pattern":
        detail = f"{field} in body should match '{error.validator_value}'"
    elif error.validator in ("maxLength", "maxItems"):
        detail = f"{field} in body should have at most {error.validator_value} " + (
            "chars long" if error.validator == "maxLength" else "items")
    elif error.validator in ("minLength", "minItems"):
        detail = f"{field} in body should have at least {error.validator_value} " + (
            "chars long" if error.validator == "minLength" else "items")
    else:
        detail = error.message
    return {"reason": "FieldValueInvalid", "field": field,
            "message": f"Invalid value: {_value(error.instance)}: {detail}"}


def validate_name(resource: Resource, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not name:
        raise errors.invalid(resource, "", [{"reason": "FieldValueRequired", "field": "metadata.name",
                                             "message": "Required value: name or generateName is required"}])
    if not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        raise errors.invalid(resource, str(name), [{"reason": "FieldValueInvalid", "field": "metadata.name",
                                                     "message": f"Invalid value: {_value(name)}: {_SUBDOMAIN_HELP}"}])
    return name


def validate(resource: Resource, obj: dict[str, Any], strict: bool = False) -> None:
    """422 Invalid (or 400 in strict field validation) unless `obj` is a valid `resource` object."""
    name = validate_name(resource, obj)
    if resource.plural not in CRD_FILES:
        return
    if strict:
        extra = unknown_field(_validator(resource.plural, True), obj)
        if extra:
            raise errors.bad_request(f'strict decoding error: unknown field "{extra}"')
    found = sorted(_validator(resource.plural, False).iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    if found:
        raise errors.invalid(resource, name, [_cause(e) for e in found[:10]])


def prune(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """A copy without fields the schema does not declare, as the API server stores custom objects."""
    if resource.plural not in CRD_FILES:
        return copy.deepcopy(obj)
    return pruned(crd_schema(resource.plural), obj)


def _prune(value: Any, schema: dict[str, Any]) -> Any:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        return {k: _prune(v, props[k]) for k, v in value.items() if k in props}
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return {k: _prune(v, schema["additionalProperties"]) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(v, schema["items"]) for v in value]
    return value
