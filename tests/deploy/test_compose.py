"""The compose file and Dockerfile, checked offline: no Docker engine runs on this machine.

Docker Compose resolves YAML merge keys and `${VAR:-default}` interpolation before validating; the
`compose-spec` validator does neither, so the test does both the way Compose does, then validates.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from compose_spec import PyCompose

REPO = Path(__file__).resolve().parents[2]
INTERPOLATION_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")
EXPECTED_SERVICES = {
    "postgres",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-init",
}


def interpolate(text: str, env: dict[str, str]) -> str:
    text = INTERPOLATION_RE.sub(lambda m: env.get(m.group(1), m.group(2) or ""), text)
    return text.replace("$$", "$")


def _resolved_compose(env: dict[str, str] | None = None) -> dict:
    data = yaml.safe_load((REPO / "docker-compose.yaml").read_text())  # resolves the x-airflow-common merges
    return yaml.safe_load(interpolate(yaml.safe_dump(data), env or {}))


def test_compose_file_validates_against_the_compose_spec():
    compose = PyCompose.from_yaml(yaml.safe_dump(_resolved_compose()))
    assert set(compose.service_names()) == EXPECTED_SERVICES


def test_compose_validator_rejects_a_broken_file():
    """The validator is not a rubber stamp: a service with a bad depends_on condition fails."""
    data = _resolved_compose()
    data["services"]["airflow-scheduler"]["depends_on"]["postgres"]["condition"] = "service_sleeping"
    with pytest.raises(ValueError):
        PyCompose.from_yaml(yaml.safe_dump(data))


def test_airflow_services_use_the_provider_image_and_mount_dags():
    services = _resolved_compose()["services"]
    for name in EXPECTED_SERVICES - {"postgres"}:
        service = services[name]
        assert service["build"] == ".", name
        assert "./dags:/opt/airflow/dags" in service["volumes"], name
        assert "_PIP_ADDITIONAL_REQUIREMENTS" not in service.get("environment", {}), name
    assert services["airflow-apiserver"]["ports"] == ["127.0.0.1:8080:8080"]
    assert "/api/v2/version" in " ".join(services["airflow-apiserver"]["healthcheck"]["test"])


def test_credentials_mount_is_read_only_and_overridable():
    services = _resolved_compose({"GCLOUD_CONFIG_DIR": "/secrets/gcloud"})["services"]
    assert "/secrets/gcloud:/opt/airflow/gcloud:ro" in services["airflow-triggerer"]["volumes"]


def test_dockerfile_installs_with_the_readme_command():
    dockerfile = (REPO / "Dockerfile").read_text()
    runs = [line.removeprefix("RUN ").strip() for line in dockerfile.splitlines() if line.startswith("RUN ")]
    install = [cmd for cmd in runs if shlex.split(cmd)[:2] == ["pip", "install"]]
    assert len(install) == 1, runs
    assert install[0] in (REPO / "README.md").read_text(), "README must give the Dockerfile's install command"
    assert re.search(r"^FROM apache/airflow:3\.\d+\.\d+", dockerfile, re.M)
