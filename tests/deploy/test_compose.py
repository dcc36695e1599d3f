"""The compose file and Dockerfile, checked offline (no Docker engine runs on this machine), and the process
topology (scripts/airflow_topology.py) checked against them: same services, commands and settings.

Docker Compose resolves YAML merge keys and `${VAR...}` interpolation before validating; the `compose-spec`
validator does neither, so `load_compose` does both the way Compose does, then the spec validates.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from compose_spec import PyCompose

from scripts.airflow_topology import (
    LOCAL_FLAGS,
    ComposeError,
    Places,
    Topology,
    argv_of,
    interpolate,
    load_compose,
    local_env,
    machine_env,
    services,
)

REPO = Path(__file__).resolve().parents[2]
SECRETS = {"AIRFLOW_JWT_SECRET": "jwt-secret", "AIRFLOW_API_SECRET_KEY": "api-secret"}
EXPECTED_SERVICES = {
    "postgres", "redis", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-worker",
    "airflow-triggerer", "airflow-init", "mtc-local",
}
AIRFLOW_SERVICES = EXPECTED_SERVICES - {"postgres", "redis"}
# The only compose settings the process topology may change: container addresses and paths.
ADDRESSES_AND_PATHS = {
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__RESULT_BACKEND", "AIRFLOW__CELERY__BROKER_URL",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS", "MTC_LOCAL_HOME", "MTC_RUNNER_BIND_HOST",
}


def _resolved(env: dict[str, str] | None = None) -> dict:
    return load_compose({**SECRETS, **(env or {})})


def test_compose_file_validates_against_the_compose_spec():
    compose = PyCompose.from_yaml(yaml.safe_dump(_resolved()))
    assert set(compose.service_names()) == EXPECTED_SERVICES


def test_compose_validator_rejects_a_broken_file():
    """The validator is not a rubber stamp: a service with a bad depends_on condition fails."""
    data = _resolved()
    data["services"]["airflow-scheduler"]["depends_on"]["postgres"]["condition"] = "service_sleeping"
    with pytest.raises(ValueError):
        PyCompose.from_yaml(yaml.safe_dump(data))


def test_interpolation_follows_compose_rules():
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("${SET:-d} ${EMPTY:-d} ${EMPTY-d} ${UNSET-d} $$HOME ${SET}", env) == "x d  d $HOME x"
    with pytest.raises(ComposeError, match="EMPTY is missing a value: say so"):
        interpolate("${EMPTY:?say so}", env)


def test_the_shared_secrets_are_required_with_a_message_naming_them():
    """Without a shared JWT secret each component would make its own and task calls would fail with
    "Invalid auth token: Signature verification failed": Compose stops before starting anything."""
    with pytest.raises(ComposeError, match="AIRFLOW_JWT_SECRET .*set AIRFLOW_JWT_SECRET in .env"):
        load_compose({"AIRFLOW_API_SECRET_KEY": "x"})
    with pytest.raises(ComposeError, match="AIRFLOW_API_SECRET_KEY"):
        load_compose({"AIRFLOW_JWT_SECRET": "x"})


def test_every_airflow_component_shares_secrets_executor_and_execution_api():
    services = _resolved()["services"]
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == "jwt-secret", name
        assert env["AIRFLOW__API__SECRET_KEY"] == "api-secret", name
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/", name
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://"), name
        assert env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] == "true", name
        assert env["MTC_LOCAL_HOME"] == "/opt/airflow/mtc-local", name
        assert "mtc-local:/opt/airflow/mtc-local" in services[name]["volumes"], name
        assert services[name]["build"] == {"context": ".", "target": "local"}, name
        assert "./dags:/opt/airflow/dags" in services[name]["volumes"], name
        assert "_PIP_ADDITIONAL_REQUIREMENTS" not in env, name
    # Two api-servers (issue #33 item 9), each publishing one host port of the range on loopback.
    assert services["airflow-apiserver"]["ports"] == [{"target": 8080, "host_ip": "127.0.0.1", "published": "8080-8081"}]
    assert "/api/v2/version" in " ".join(services["airflow-apiserver"]["healthcheck"]["test"])


def test_init_sets_a_password_instead_of_the_fab_user_create():
    """`_AIRFLOW_WWW_USER_CREATE` runs FAB's `airflow users create` and the entrypoint exits without a password;
    with SimpleAuthManager the init writes the password file the auth manager reads."""
    init = _resolved()["services"]["airflow-init"]
    assert "_AIRFLOW_WWW_USER_CREATE" not in init["environment"]
    assert init["environment"]["_AIRFLOW_WWW_USER_PASSWORD"] == "airflow"  # the official file's default
    assert init["user"] == "0:0"
    script = init["command"][1]
    assert "_AIRFLOW_WWW_USER_PASSWORD is empty" in script and "airflow db migrate" in script
    assert "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in script
    assert init["environment"]["AIRFLOW__CORE__AUTH_MANAGER"].endswith("SimpleAuthManager")


def test_mtc_local_volume_is_the_airflow_users_and_its_supervisor_is_reachable():
    services = _resolved({"AIRFLOW_UID": "1234"})["services"]
    script = services["airflow-init"]["command"][1]
    assert re.search(r'chown -R "1234:0" .*"\$\{MTC_LOCAL_HOME\}"', script), script
    dockerfile = (REPO / "Dockerfile").read_text()
    # A new named volume copies the image folder's owner: the airflow user (uid 50000) creates it.
    assert dockerfile.index("USER airflow") < dockerfile.index("mkdir -p /opt/airflow/mtc-local")
    local = services["mtc-local"]
    assert local["hostname"] == "mtc-local" and local["environment"]["MTC_RUNNER_BIND_HOST"] == "0.0.0.0"
    assert local["environment"]["MTC_RUNNER_IDLE_SECONDS"] == "inf"
    assert "mtc_local.supervisor" in " ".join(local["command"])
    assert all(services[n]["user"] == "1234:0" for n in AIRFLOW_SERVICES - {"airflow-init"})


def test_pools_split_the_worker_slots_so_a_launch_retry_never_waits_behind_general_tasks():
    """docs/deployment.md, "Worker slots on the resubmission path": the launch pool and default_pool together are
    the worker's slots, each scheduler may queue all of them, and the sample DAG puts `train` in the launch pool."""
    common = _resolved()["services"]["airflow-worker"]["environment"]
    slots, launch = int(common["AIRFLOW__CELERY__WORKER_CONCURRENCY"]), int(common["MTC_LAUNCH_SLOTS"])
    assert 1 <= launch < slots <= int(common["AIRFLOW__CORE__PARALLELISM"]), common
    script = _resolved()["services"]["airflow-init"]["command"][1]
    assert script.index("MTC_LAUNCH_SLOTS is") < script.index("mkdir") < script.index("airflow pools import")
    dag = subprocess.run(
        [sys.executable, "-c", "import runpy; g = runpy.run_path('dags/mtc_resilient_training.py'); "
                               "t = g['dag'].get_task('train'); print('train pool:', t.pool)"],
        cwd=REPO, env={**os.environ, "MTC_LAUNCH_POOL": common["MTC_LAUNCH_POOL"]},
        capture_output=True, text=True, timeout=120)
    assert f"train pool: {common['MTC_LAUNCH_POOL']}\n" in dag.stdout, (dag.stdout[-2000:], dag.stderr[-2000:])


@pytest.mark.parametrize("launch_slots", ["0", "16", "20"])
def test_init_refuses_pools_that_leave_no_slot_before_any_side_effect(tmp_path: Path, launch_slots: str):
    """The init script itself (bash), with slots that leave the launch pool or default_pool empty: a task in an
    empty pool is never scheduled. It stops with the setting, its value and the bound, before it writes a file or
    calls Airflow (no `airflow` is on its PATH)."""
    init = _resolved()["services"]["airflow-init"]
    env = {**init["environment"], "MTC_LAUNCH_SLOTS": launch_slots, "PATH": "/usr/bin:/bin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp_path / "config" / "passwords.json"),
           "MTC_LOCAL_HOME": str(tmp_path / "local"), "AIRFLOW_HOME": str(tmp_path / "home")}
    done = subprocess.run(["bash", *init["command"]], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"MTC_LAUNCH_SLOTS is {launch_slots}: it must be at least 1 and below" in done.stderr
    assert "AIRFLOW__CELERY__WORKER_CONCURRENCY (16)" in done.stderr
    assert not list(tmp_path.iterdir())


def test_two_schedulers_two_triggerers_and_two_api_servers():
    services = _resolved()["services"]
    assert services["airflow-scheduler"]["deploy"]["replicas"] == 2
    assert services["airflow-triggerer"]["deploy"]["replicas"] == 2
    assert services["airflow-apiserver"]["deploy"]["replicas"] == 2
    assert services["airflow-worker"]["command"] == "celery worker"
    # Compose gives each replica one host port of a published range: as many ports as replicas, or the second
    # replica cannot start ("port is already allocated").
    (published,) = services["airflow-apiserver"]["ports"]
    first, last = map(int, published["published"].split("-"))
    assert last - first + 1 == services["airflow-apiserver"]["deploy"]["replicas"]


def test_credentials_mount_is_read_only_and_overridable():
    services = _resolved({"GCLOUD_CONFIG_DIR": "/secrets/gcloud"})["services"]
    assert "/secrets/gcloud:/opt/airflow/gcloud:ro" in services["airflow-triggerer"]["volumes"]


# Who calls Google APIs: the worker runs the tasks (bucket, IAM, GKE), the triggerer the deferred watches (the GKE
# async hook, GCS listings). Parsing, scheduling, the UI and the local target's pods (workload code) do not.
NEEDS_GOOGLE_CREDENTIALS = {"airflow-worker", "airflow-triggerer"}
ADC = "/opt/airflow/gcloud/application_default_credentials.json"


def _mounts(spec: dict) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each short-syntax volume (https://docs.docker.com/reference/compose-file/services/#short-syntax-5)."""
    return [tuple((entry.split(":") + ["rw"])[:3]) for entry in spec.get("volumes") or []]


def test_compose_adc_only_where_google_apis_are_called_and_read_only():
    """Issue 23 `compose_adc`: the user's Application Default Credentials were mounted into every container,
    mtc-local too, where workload code runs. Now only the worker and the triggerer get the folder (read-only) and
    GOOGLE_APPLICATION_CREDENTIALS; the compose spec still validates."""
    resolved = _resolved({"GCLOUD_CONFIG_DIR": "/secrets/gcloud"})
    PyCompose.from_yaml(yaml.safe_dump(resolved))
    services = resolved["services"]
    with_adc = {name for name, spec in services.items()
                if any(source == "/secrets/gcloud" or target.startswith("/opt/airflow/gcloud")
                       for source, target, _ in _mounts(spec))}
    with_env = {name for name, spec in services.items()
                if "GOOGLE_APPLICATION_CREDENTIALS" in (spec.get("environment") or {})}
    assert with_adc == NEEDS_GOOGLE_CREDENTIALS and with_env == NEEDS_GOOGLE_CREDENTIALS
    for name in NEEDS_GOOGLE_CREDENTIALS:
        assert ("/secrets/gcloud", "/opt/airflow/gcloud", "ro") in _mounts(services[name]), name
        assert services[name]["environment"]["GOOGLE_APPLICATION_CREDENTIALS"] == ADC
        assert {t for _, t, _ in _mounts(services[name])} >= {"/opt/airflow/dags", "/opt/airflow/mtc-local"}, name
    assert not any("gcloud" in str(v) for v in services["mtc-local"]["environment"].values())


def test_topology_gives_credentials_only_to_the_services_that_declare_them(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/somewhere/adc.json")  # the caller's own: not passed on
    topology = Topology(tmp_path)
    for name, service in topology.services.items():
        env = topology.env_for(service, 1)
        assert ("GOOGLE_APPLICATION_CREDENTIALS" in env) == (name in NEEDS_GOOGLE_CREDENTIALS), name
        assert env.get("GOOGLE_APPLICATION_CREDENTIALS") != "/somewhere/adc.json", name


# ---- the Dockerfile, read as Docker reads it (no engine runs here) -----------------------------------------
@dataclass
class Stage:
    name: str
    base: str  # an image reference, or the name of an earlier stage
    instructions: list[tuple[str, str]]  # (INSTRUCTION, arguments), continuation lines joined


def dockerfile_stages(text: str) -> dict[str, Stage]:
    """The stages of a Dockerfile: comments dropped, `\\` continuations joined, one Stage per `FROM ... AS name`
    (https://docs.docker.com/reference/dockerfile/#format)."""
    logical, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        logical.append(current.strip())
        current = ""
    stages: dict[str, Stage] = {}
    stage = None
    for line in logical:
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            words = args.split()
            assert len(words) == 3 and words[1].upper() == "AS", f"every stage is named: {line}"
            stage = stages[words[2]] = Stage(words[2], words[0], [])
        else:
            stage.instructions.append((keyword.upper(), args.strip()))
    return stages


STAGES = dockerfile_stages((REPO / "Dockerfile").read_text())


def lineage(name: str) -> list[Stage]:
    """The stage and the stages it is built FROM, nearest first."""
    chain = [STAGES[name]]
    while chain[-1].base in STAGES:
        chain.append(STAGES[chain[-1].base])
    return chain


def runs(stage: Stage) -> list[str]:
    return [args for keyword, args in stage.instructions if keyword == "RUN"]


def commands(stage: Stage) -> list[list[str]]:
    """Each shell command of the stage's RUN lines, split as the shell would (`&&` separates)."""
    return [shlex.split(part) for run in runs(stage) for part in run.split("&&")]


def installed_requirements(name: str) -> list[str]:
    """The requirement files the target's `pip install -r` lines install, over its whole lineage."""
    found = []
    for stage in lineage(name):
        for argv in commands(stage):
            if argv[:2] == ["pip", "install"]:
                found += [argv[i + 1] for i, word in enumerate(argv) if word == "-r"]
    return found


def export_command(output: str) -> list[str]:
    """The `uv export` command (in any stage) that writes `output`."""
    (argv,) = [argv for stage in STAGES.values() for argv in commands(stage)
               if argv[:2] == ["uv", "export"] and argv[argv.index("--output-file") + 1] == output]
    return argv


def locked(name: str) -> set[str]:
    return set(re.findall(rf'^name = "{re.escape(name)}"\nversion = "([^"]+)"', (REPO / "uv.lock").read_text(), re.M))


def test_dockerfile_has_a_gke_target_and_a_local_target_and_compose_builds_local():
    """Issue 27 `images`: the Dockerfile always installed the `local` extra (JAX), so there was no GKE-only image."""
    assert {"gke", "local"} <= set(STAGES)
    assert STAGES["local"].base == "gke", "the local image is the GKE image plus the local extra"
    build = _resolved()["services"]["airflow-worker"]["build"]
    assert build["target"] == "local" and build["target"] in STAGES


def test_gke_target_never_installs_the_local_extra_or_jax(tmp_path: Path):
    """The GKE image's pins are exported without the `local` extra, and nothing in its stages names JAX/Orbax or
    `[local]`. The export is run here exactly as the Dockerfile writes it (offline: --frozen reads only uv.lock)."""
    for stage in lineage("gke"):
        text = " ".join(runs(stage)).lower()
        assert not re.search(r"jax|orbax|\[local\]|--extra local|mtc.local", text), (stage.name, text)
    (requirements,) = installed_requirements("gke")
    pins = _export(export_command(requirements), tmp_path / "gke.txt")
    assert pins["apache-airflow"] == locked("apache-airflow")
    assert not {"jax", "jaxlib", "orbax-checkpoint"} & set(pins), "the GKE image would carry JAX"
    assert pins["apache-airflow-providers-google"] == locked("apache-airflow-providers-google")
    # MaxText's own goodput, read back by the goodput task and shown in the run view (issue 35 item 2).
    assert pins["ml-goodput-measurement"] == locked("ml-goodput-measurement"), "no goodput reader in the GKE image"


def test_local_target_adds_jax_at_the_locked_versions(tmp_path: Path):
    requirements = installed_requirements("local")
    assert "--extra" in export_command(requirements[0]) and len(requirements) == 2
    pins = _export(export_command(requirements[0]), tmp_path / "local.txt")  # the local stage's own file
    assert pins["jax"] == locked("jax") and pins["orbax-checkpoint"] == locked("orbax-checkpoint")
    assert "mkdir -p /opt/airflow/mtc-local" in " ".join(runs(STAGES["local"]))
    # The rehearsal's servers come in its own wheel (mtc-local), installed by the local stage only.
    assert "/tmp/mtc-local-dist/mtc_local-*.whl" in " ".join(runs(STAGES["local"]))


def _export(argv: list[str], out: Path) -> dict[str, set[str]]:
    """Run the Dockerfile's `uv export` with the pinned uv, writing to `out`; name -> pinned versions (one per
    marker branch)."""
    argv = list(argv)
    argv[argv.index("--output-file") + 1] = str(out)
    uv = REPO / ".tools" / "bin" / "uv"
    subprocess.run([str(uv) if uv.exists() else "uv", *argv[1:], "--project", str(REPO)], check=True,
                   capture_output=True, text=True, timeout=120)
    pins: dict[str, set[str]] = {}
    for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==([^ ;\n]+)", out.read_text(), re.M):
        pins.setdefault(name.lower(), set()).add(version)
    return pins


def test_every_image_install_is_pinned_to_the_lock():
    """Pinned to the lock: each `pip install` installs exported files only (plus the wheel built from this
    source); each export is `--frozen` (the lock as committed) without hashes of the project itself."""
    exports = [argv for stage in STAGES.values() for argv in commands(stage) if argv[:2] == ["uv", "export"]]
    assert exports and all("--frozen" in argv and "--no-emit-project" in argv for argv in exports), exports
    for stage in STAGES.values():
        for argv in commands(stage):
            if argv[:2] != ["pip", "install"]:
                continue
            files = [w for i, w in enumerate(argv[2:], 2) if argv[i - 1] == "-r"]
            rest = [w for i, w in enumerate(argv[2:], 2) if w != "-r" and argv[i - 1] != "-r"]
            assert files, (stage.name, argv)
            assert all(w.startswith("--no-cache-dir") or re.fullmatch(r"/tmp/mtc-dist/airflow_provider_mtc-\*\.whl"
                                                                 r"|/tmp/mtc-local-dist/mtc_local-\*\.whl", w)
                       for w in rest), (stage.name, argv)


def test_images_use_the_locked_airflow_and_the_makefiles_uv():
    airflow = {stage.base.split(":")[1].split("-")[0] for stage in STAGES.values()
               if stage.base.startswith("apache/airflow:")}
    assert airflow == locked("apache-airflow"), airflow
    (uv_image,) = [stage.base for stage in STAGES.values() if stage.base.startswith("ghcr.io/astral-sh/uv:")]
    (make_uv,) = re.findall(r"^UV_VERSION := (\S+)", (REPO / "Makefile").read_text(), re.M)
    assert uv_image.endswith(":" + make_uv)


# ---- the process topology is the compose file ---------------------------------------------------------
def test_topology_runs_the_compose_commands_with_only_declared_changes(tmp_path: Path):
    topology = Topology(tmp_path)
    compose = load_compose(topology.compose_env)["services"]
    places: Places = topology.places
    local, machine = local_env(places), machine_env(places)
    composed_keys = set().union(*(s["environment"] for n, s in compose.items() if n in AIRFLOW_SERVICES))
    assert set(local) == ADDRESSES_AND_PATHS, "the topology may replace container addresses and paths only"
    assert set(local) <= composed_keys, "a local replacement for a setting the compose file does not have"
    assert not set(machine) & composed_keys, "machine settings must not silently override compose settings"
    assert set(topology.services) == AIRFLOW_SERVICES
    for name, service in topology.services.items():
        spec = compose[name]
        assert service.replicas == (spec.get("deploy") or {}).get("replicas", 1)
        argv = argv_of(service)
        if "entrypoint" in spec:
            assert argv == [*shlex.split(spec["entrypoint"]), *spec["command"]], name
        else:
            command = shlex.split(spec["command"]) if isinstance(spec["command"], str) else spec["command"]
            assert Path(argv[0]).name == "airflow", name
            assert argv[1:] == [*command, *LOCAL_FLAGS.get(" ".join(command), [])], name
        env = topology.env_for(service, 1)
        for key, value in spec["environment"].items():
            expected = local.get(key, "" if value is None else str(value))
            assert env[key] == expected, (name, key)


def test_topology_database_and_broker_are_this_runs_own(tmp_path: Path):
    one, two = Topology(tmp_path / "a"), Topology(tmp_path / "b")
    assert one.places.database != two.places.database and one.places.key_prefix != two.places.key_prefix
    env = one.env_for(one.services["airflow-worker"], 1)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith("/" + one.places.database)
    assert env["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX"] == one.places.key_prefix
    scheduler = one.services["airflow-scheduler"]
    ports = {one.env_for(scheduler, i)["AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT"] for i in (1, 2)}
    assert len(ports) == 2  # two schedulers on one machine: a health server each


def test_the_task_sdks_api_client_rides_out_an_api_server_restart_during_a_resume(monkeypatch):
    """Issue #33 item 9: a resumed try's first Execution API calls failed while the api-server was down for 45 s or
    took 44.7 s to answer its first request. The Task SDK's client retries with tenacity
    `stop_after_attempt([workers] execution_api_retries)` and `wait_random_exponential(min=..._retry_wait_min,
    max=..._retry_wait_max)`, each request bounded by `execution_api_timeout` (apache/airflow task-sdk
    src/airflow/sdk/api/client.py@3.3.2, `Client.request`). The shortest schedule the compose settings allow (every
    random wait at its lower bound) must outlast the outage, and one request must outwait the slow first answer;
    Airflow's defaults (5 tries, 1-90 s, 5 s) do neither."""
    import random

    import tenacity

    def shortest_wait(retries: int, wait_min: float, wait_max: float) -> float:
        monkeypatch.setattr(random, "uniform", lambda low, high: low)  # the shortest draw of each wait
        wait = tenacity.wait_random_exponential(min=wait_min, max=wait_max)
        states = [tenacity.RetryCallState(None, None, (), {}) for _ in range(retries - 1)]
        for number, state in enumerate(states, start=1):
            state.attempt_number = number
        return sum(wait(state) for state in states)

    for name in AIRFLOW_SERVICES - {"airflow-init", "mtc-local"}:
        env = _resolved()["services"][name]["environment"]
        budget = shortest_wait(int(env["AIRFLOW__WORKERS__EXECUTION_API_RETRIES"]),
                               float(env["AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN"]),
                               float(env["AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX"]))
        assert budget >= 90, (name, budget)  # twice the 45 s outage seen
        assert float(env["AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT"]) > 44.7, name
    assert shortest_wait(5, 1.0, 90.0) < 45  # Airflow's defaults: the failure the soak saw
