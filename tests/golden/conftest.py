"""Schemas the golden manifests are validated against (upstream CRDs kept in tests/data/third_party)."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import reference_file


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected: the API server prunes them silently, which hides typos
    (and `mountOptions` instead of `gcsFuseMountOptions`)."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                node.get("type") == "object"
                and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def crd_schema(name: str) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses the 10,000-line CRDs ~10x faster
    crd = yaml.load(reference_file(name).read_text(), Loader=loader)
    schema = strict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    # The API server supplies these for every kind; some CRDs leave them out of their schema.
    for key, kind in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object")):
        schema["properties"].setdefault(key, {"type": kind})
    return schema


def validator(name: str) -> jsonschema.protocols.Validator:
    """A validator built (and its schema checked) once: the JobSet schema is ~10,000 lines."""
    schema = crd_schema(name)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="session")
def jobset_validators() -> dict[str, jsonschema.protocols.Validator]:
    return {name: validator(name) for name in ("jobset-crd-v0.10.1.yaml", "jobset-crd-v0.12.0.yaml")}


@pytest.fixture(scope="session")
def checkpoint_configuration_validator() -> jsonschema.protocols.Validator:
    return validator("checkpointconfiguration-crd.yaml")
