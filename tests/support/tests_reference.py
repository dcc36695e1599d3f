"""The CheckpointConfiguration CRD's declared spec fields, read from tests/data/third_party."""

from __future__ import annotations

import yaml


def crd_schema() -> dict:
    from tests.conftest import reference_file

    crd = yaml.safe_load(reference_file("checkpointconfiguration-crd.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


def crd_spec_fields() -> set[str]:
    return set(crd_schema()["properties"]["spec"]["properties"])
