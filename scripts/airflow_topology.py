"""docker-compose.yaml's Airflow, run as processes on one machine: the same services, commands and environment.

Each compose service becomes `deploy.replicas` processes (two schedulers, two triggerers, two api-servers, one
Celery worker, dag-processor, the local target's supervisor), after airflow-init's own script has run. What a
container gets from Docker is replaced, and only that (`LOCAL_ENV`, `LOCAL_FLAGS`): container addresses become
127.0.0.1 and ports chosen here, container paths become folders under one root, each replica gets its own host
name (containers have one each), and the log servers, which always listen on every interface and on one fixed
port, are not started (the api-server reads task logs from the shared log folder). tests/deploy checks that
nothing else differs. The metadata database is a new PostgreSQL database per run, the broker a Redis key prefix
per run; both are removed by `drop()`.

Docker's network is replaced by forwarders (scripts/tcp_proxy.py), one per service Airflow reaches by name: the
api-server's replicas each listen on a port of their own and the `airflow-apiserver` forwarder hands connections
round robin to them, the next one when one refuses (Docker's DNS round robin over the replicas, each address
tried in turn by the client); `postgres` and `redis` forward to the machine's servers, which are shared and must
never be stopped, so `outage(service)` makes a service unreachable for this topology alone (refused
connections, open ones reset). `restart_always()` restarts a replica that exits, as `restart: always` does.

    python scripts/airflow_topology.py          # start, print the UI address and login, stop on Ctrl-C
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yaml"
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-worker",
                    "airflow-triggerer", "mtc-local")
INIT_SERVICE = "airflow-init"
HOSTNAME_ENV = "MTC_TOPOLOGY_HOSTNAME"
MARKER_ENV = "MTC_TOPOLOGY_ROOT"  # every process of a topology carries it: how leftovers are found
POSTGRES_ADMIN_DSN = os.environ.get("MTC_TOPOLOGY_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("MTC_TOPOLOGY_REDIS", "redis://127.0.0.1:6379/0")
# The log servers listen on every interface on a fixed port: fine in a container, a clash for two triggerers here.
LOCAL_FLAGS = {"scheduler": ["--skip-serve-logs"], "triggerer": ["--skip-serve-logs"],
               "celery worker": ["--skip-serve-logs"]}
# Docker's restart policy: "an increasing delay (double the previous delay, starting at 100 milliseconds)",
# reset once the container ran 10 s (docs.docker.com, "Start containers automatically").
RESTART_DELAY_S, RESTART_RESET_S = 0.1, 10.0
FORWARDED = ("postgres", "redis", "airflow-apiserver")  # the compose service names Airflow connects to
INTERPOLATION_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def component_hostname() -> str:
    """Airflow's [core] hostname_callable here: each process its own name, as each container has."""
    return os.environ.get(HOSTNAME_ENV) or socket.getfqdn()


# ---- the compose file, resolved as Docker Compose resolves it --------------------------------------------
class ComposeError(ValueError):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    """`${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `$$` (Compose's rules)."""
    def one(match: re.Match) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        value = env.get(name)
        if op in (":?", "?") and (value is None or (op == ":?" and value == "")):
            raise ComposeError(f"required variable {name} is missing a value: {arg}")
        if op == ":-" and not value:
            return arg
        if op == "-" and value is None:
            return arg
        return value or ""

    out, last = [], 0
    for match in re.finditer(r"\$\$|\$\{[^}]*\}", text):
        out.append(text[last:match.start()])
        token = match.group(0)
        out.append("$" if token == "$$" else one(INTERPOLATION_RE.fullmatch(token) or _bad(token)))
        last = match.end()
    out.append(text[last:])
    return "".join(out)


def _bad(token: str) -> re.Match:
    raise ComposeError(f"invalid interpolation {token!r}")


def load_compose(env: dict[str, str], path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose file with its `<<:` merges resolved (YAML does it) and every string interpolated."""
    import yaml

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {walk(k): walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return interpolate(node, env) if isinstance(node, str) else node

    return walk(yaml.safe_load(path.read_text()))


def as_argv(value: str | list[str] | None) -> list[str]:
    """Compose's `command`/`entrypoint`: a list as is, a string split like a shell would."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else shlex.split(value)


@dataclass(frozen=True)
class Service:
    name: str
    entrypoint: list[str]
    command: list[str]
    environment: dict[str, str]
    replicas: int

    @property
    def airflow_command(self) -> str | None:
        """The airflow subcommand (`scheduler`, `celery worker`), or None for a service with its own entrypoint."""
        return None if self.entrypoint else " ".join(self.command)


def services(compose: dict[str, Any]) -> dict[str, Service]:
    found = {}
    for name, spec in compose["services"].items():
        if "build" not in spec:
            continue  # postgres and redis: the machine's own services stand in for them
        env = {k: "" if v is None else str(v) for k, v in (spec.get("environment") or {}).items()}
        found[name] = Service(name, as_argv(spec.get("entrypoint")), as_argv(spec.get("command")), env,
                              int((spec.get("deploy") or {}).get("replicas", 1)))
    return found


# ---- what one machine changes --------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _host_port(url: str, default_port: int) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


@dataclass
class Places:
    """Addresses and folders of one topology on this machine."""

    root: Path
    database: str
    key_prefix: str
    api_port: int  # the api-server's forwarder: Airflow's and the UI's address of the api-server
    dags_folder: Path
    postgres_port: int = field(default_factory=free_port)  # the forwarders Airflow reaches the machine's servers by
    redis_port: int = field(default_factory=free_port)
    api_replica_ports: tuple[int, ...] = ()

    @property
    def sql_alchemy_conn(self) -> str:
        """The database, direct (the harness's own reads: they go on during an outage made for Airflow)."""
        base = POSTGRES_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://", 1)
        return f"{base}/{self.database}"

    @property
    def airflow_sql_alchemy_conn(self) -> str:
        """The database through its forwarder (what Airflow's components use)."""
        host, port = _host_port(POSTGRES_ADMIN_DSN, 5432)
        return self.sql_alchemy_conn.replace(f"@{host}:{port}/", f"@127.0.0.1:{self.postgres_port}/", 1)

    @property
    def redis_url(self) -> str:
        host, port = _host_port(REDIS_URL, 6379)
        return REDIS_URL.replace(f"{host}:{port}", f"127.0.0.1:{self.redis_port}", 1)

    def backends(self) -> dict[str, list[str]]:
        """Each forwarder's listening port and where it forwards to."""
        return {"postgres": [f"127.0.0.1:{self.postgres_port}", "%s:%d" % _host_port(POSTGRES_ADMIN_DSN, 5432)],
                "redis": [f"127.0.0.1:{self.redis_port}", "%s:%d" % _host_port(REDIS_URL, 6379)],
                "airflow-apiserver": [f"127.0.0.1:{self.api_port}",
                                      *(f"127.0.0.1:{p}" for p in self.api_replica_ports)]}

    @property
    def local_home(self) -> Path:
        return self.root / "mtc-local"

    @property
    def airflow_home(self) -> Path:
        return self.root / "airflow"


def local_env(places: Places) -> dict[str, str]:
    """Compose settings whose values are container addresses or paths, with this machine's values."""
    return {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": places.airflow_sql_alchemy_conn,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + places.airflow_sql_alchemy_conn,
        "AIRFLOW__CELERY__BROKER_URL": places.redis_url,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{places.api_port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(places.root / "config" / "passwords.json"),
        "GOOGLE_APPLICATION_CREDENTIALS": str(places.root / "gcloud" / "application_default_credentials.json"),
        "MTC_LOCAL_HOME": str(places.local_home),
        "MTC_RUNNER_BIND_HOST": "127.0.0.1",  # servers here bind loopback; containers need every interface
    }


def machine_env(places: Places) -> dict[str, str]:
    """What a container has from the image or from Docker, and one machine must set (not compose settings)."""
    return {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),  # component_hostname
        "PYTHONUNBUFFERED": "1",
        "AIRFLOW_HOME": str(places.airflow_home),  # the image's /opt/airflow
        "AIRFLOW__CORE__DAGS_FOLDER": str(places.dags_folder),  # the ./dags bind mount
        "AIRFLOW__API__HOST": "127.0.0.1",  # the container's port 8080, published on 127.0.0.1
        "AIRFLOW__API__PORT": str(places.api_port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{places.api_port}",
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__GLOBAL_KEYPREFIX": places.key_prefix,  # Redis is shared here
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "scripts.airflow_topology.component_hostname",
        MARKER_ENV: str(places.root),
    }


def replica_env(service: Service, index: int, places: Places) -> dict[str, str]:
    env = {HOSTNAME_ENV: f"{service.name}-{index}"}
    if service.airflow_command == "scheduler":  # its health server: a port of its own, on loopback
        env["AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST"] = "127.0.0.1"
        env["AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT"] = str(free_port())
    if service.airflow_command == "api-server":  # each replica its own port, behind the forwarder
        env["AIRFLOW__API__PORT"] = str(places.api_replica_ports[index - 1])
    return env


def argv_of(service: Service) -> list[str]:
    """The process for a service: its entrypoint and command, or `airflow <command>` (the image's entrypoint)."""
    if service.entrypoint:
        return [*service.entrypoint, *service.command]
    return [str(Path(sys.executable).parent / "airflow"), *service.command,
            *LOCAL_FLAGS.get(service.airflow_command or "", [])]


# ---- the running topology ---------------------------------------------------------------------------------
@dataclass
class Topology:
    root: Path
    dags_folder: Path = REPO / "dags"
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. shorter heartbeats for a test
    username: str = "airflow"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    argvs: dict[str, list[str]] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)  # replicas killed on purpose (not a failure)
    forwarders: dict[str, subprocess.Popen] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)  # forwarded services made unreachable right now
    restarts: list[dict[str, Any]] = field(default_factory=list)  # by restart_always(): replica, time, exit code

    def __post_init__(self) -> None:
        run = uuid.uuid4().hex[:10]
        self.compose_env = {
            "AIRFLOW_UID": str(os.getuid()),
            "AIRFLOW_JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW_API_SECRET_KEY": secrets.token_urlsafe(32),
            "_AIRFLOW_WWW_USER_USERNAME": self.username,
            "_AIRFLOW_WWW_USER_PASSWORD": self.password,
        }
        self.services = services(load_compose(self.compose_env))
        api_ports = tuple(free_port() for _ in range(self.services["airflow-apiserver"].replicas))
        self.places = Places(self.root, f"mtc_topology_{run}", f"mtc-topology-{run}:", free_port(), self.dags_folder,
                             api_replica_ports=api_ports)
        self._token = ""
        self._restarter: Any = None
        self._restarting = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.places.api_port}"

    def env_for(self, service: Service, index: int) -> dict[str, str]:
        # Credentials reach only the services whose compose environment names them (worker and triggerer).
        inherited = {k: v for k, v in os.environ.items()
                     if not k.startswith(("AIRFLOW", "MTC_", "_AIRFLOW")) and k != "GOOGLE_APPLICATION_CREDENTIALS"}
        local = {k: v for k, v in local_env(self.places).items() if k in service.environment}
        return {**inherited, **service.environment, **local, **machine_env(self.places),
                **replica_env(service, index, self.places), **self.extra_env}

    def log_path(self, name: str) -> Path:
        return self.root / "component-logs" / f"{name}.log"

    # ---- lifecycle ----
    def create_database(self) -> None:
        _admin_sql(f'CREATE DATABASE "{self.places.database}"')

    def run_init(self, timeout: float = 300) -> None:
        init = self.services[INIT_SERVICE]
        self.log_path(INIT_SERVICE).parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path(INIT_SERVICE), "ab") as log:
            done = subprocess.run(argv_of(init), env=self.env_for(init, 1), stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout)
        if done.returncode:
            raise RuntimeError(f"{INIT_SERVICE} exited {done.returncode}:\n{self.log_tail(INIT_SERVICE)}")

    def start(self, timeout: float = 240) -> None:
        self.create_database()
        self.start_forwarders()
        self.run_init()
        for name in AIRFLOW_SERVICES:
            service = self.services[name]
            for index in range(1, service.replicas + 1):
                self.spawn(f"{name}-{index}")
        self.wait_healthy(timeout)

    def start_forwarders(self) -> None:
        self.log_path("forwarders").parent.mkdir(parents=True, exist_ok=True)
        for name, (listen, *backends) in self.places.backends().items():
            argv = [sys.executable, "-m", "scripts.tcp_proxy", "--listen", listen,
                    *(a for b in backends for a in ("--backend", b))]
            env = {**os.environ, "PYTHONPATH": str(REPO), MARKER_ENV: str(self.root)}
            with open(self.log_path(f"forward-{name}"), "ab") as log:
                self.forwarders[name] = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                                         stderr=subprocess.STDOUT, cwd=str(REPO),
                                                         start_new_session=True)
        for name, (listen, *_) in self.places.backends().items():
            wait_until(f"the {name} forwarder listening", lambda: _accepts(listen), 60,
                       alive=lambda: self._forwarder_alive(name))

    def _forwarder_alive(self, name: str) -> None:
        if self.forwarders[name].poll() is not None:
            raise RuntimeError(f"the {name} forwarder exited:\n{self.log_tail('forward-' + name)}")

    def outage(self, service: str, unreachable: bool = True) -> None:
        """Make a service Airflow reaches by name unreachable (its connections refused, open ones reset), or
        reachable again: `postgres`, `redis` (the machine's servers go on serving everyone else)."""
        listen = self.places.backends()[service][0]
        os.kill(self.forwarders[service].pid, signal.SIGUSR1 if unreachable else signal.SIGUSR2)
        (self.down.add if unreachable else self.down.discard)(service)
        wait_until(f"{service} {'unreachable' if unreachable else 'reachable'}",
                   lambda: _accepts(listen) != unreachable, 30, interval=0.1,
                   alive=lambda: self._forwarder_alive(service))

    def restart_always(self, interval: float = 0.5) -> None:
        """From now on, a replica that exits (not one killed on purpose) is started again after Docker's
        doubling delay: what `restart: always` does when a database outage stops a scheduler."""
        import threading

        delays: dict[str, float] = {}
        due: dict[str, float] = {}

        def loop() -> None:
            while self._restarting:
                now = time.monotonic()
                for name, proc in list(self.procs.items()):
                    if proc.poll() is None or name in self.killed:
                        due.pop(name, None)  # running again, or killed on purpose: its owner restarts it
                        if proc.poll() is None and now - getattr(proc, "started_at", now) > RESTART_RESET_S:
                            delays.pop(name, None)
                        continue
                    if name not in due:
                        delays[name] = delays.get(name, RESTART_DELAY_S / 2) * 2
                        due[name] = now + delays[name]
                        self.restarts.append({"replica": name, "exited": proc.returncode, "at": time.time(),
                                              "delay_s": round(delays[name], 1)})
                    elif now >= due[name]:
                        del due[name]
                        self.spawn(name)
                time.sleep(interval)

        self._restarting = True
        self._restarter = threading.Thread(target=loop, name="restart-always", daemon=True)
        self._restarter.start()

    def spawn(self, proc_name: str) -> None:
        """Start (or restart, as `restart: always` does) one replica, e.g. `airflow-worker-1`."""
        service_name, index = proc_name.rsplit("-", 1)
        service = self.services[service_name]
        env = self.env_for(service, int(index))
        self.envs[proc_name], self.argvs[proc_name] = env, argv_of(service)
        with open(self.log_path(proc_name), "ab") as log:
            # A session of its own: the whole group can be signalled, and SIGINT is not ignored.
            self.procs[proc_name] = subprocess.Popen(
                self.argvs[proc_name], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=str(self.root),
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.procs[proc_name].started_at = time.monotonic()  # type: ignore[attr-defined]

    def wait_healthy(self, timeout: float) -> None:
        def healthy() -> bool:
            import requests

            try:
                health = requests.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).json()
            except requests.RequestException:
                return False
            return all((health.get(part) or {}).get("status") == "healthy"
                       for part in ("metadatabase", "scheduler", "triggerer", "dag_processor"))

        wait_until("every component healthy", healthy, timeout, alive=self.check_alive)

    def check_alive(self) -> None:
        for name in self.forwarders:
            self._forwarder_alive(name)
        if self._restarting:
            return  # an exited replica is restarted, as Docker would
        for name, proc in self.procs.items():
            if proc.poll() is not None and name not in self.killed:
                raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.log_tail(name)}")

    def kill(self, proc_name: str) -> list[int]:
        """SIGKILL a replica and everything it started (a container dying): returns the PIDs killed."""
        import psutil

        proc = self.procs[proc_name]
        self.killed.add(proc_name)  # first: restart_always() must not take this death for a crash
        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        for p in tree:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        proc.wait(30)
        psutil.wait_procs(tree, timeout=30)
        self.killed.add(proc_name)
        return [p.pid for p in tree]

    def restart(self, proc_name: str) -> None:
        self.spawn(proc_name)  # then unmark: restart_always() never sees the dead one unmarked
        self.killed.discard(proc_name)

    def leftovers(self) -> list[Any]:
        import psutil

        found = []
        root = str(self.root)
        for p in psutil.process_iter():
            try:
                if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                    continue
                # Airflow processes carry the marker; pods start from an explicit environment but name the root.
                if p.environ().get(MARKER_ENV) == root or any(root in part for part in p.cmdline()):
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return found

    def stop(self, timeout: float = 60) -> list[str]:
        """SIGINT every replica's group (the supervisor last: it stops its pods), wait, kill stragglers by PID;
        returns what had to be killed."""
        import psutil

        self._restarting = False
        if self._restarter is not None:
            self._restarter.join(10)
        for service in list(self.down):
            self.outage(service, unreachable=False)  # Airflow's components stop cleanly with their services
        order = [n for n in self.procs if not n.startswith("mtc-local")] + \
                [n for n in self.procs if n.startswith("mtc-local")]
        for name in order:
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGINT if not name.startswith("mtc-local") else signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        # The home's local GCS, started on demand by tasks (not a compose service here): stopped by its PID file.
        subprocess.run([sys.executable, "-m", "mtc_local.gcs", "down", "--home", str(self.places.local_home)],
                       capture_output=True, timeout=60)
        for proc in self.forwarders.values():  # last: Airflow's components needed them to stop
            if proc.poll() is None:
                proc.terminate()
        for proc in self.forwarders.values():
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        survivors = self.leftovers()
        while survivors and time.monotonic() < deadline:
            time.sleep(0.5)
            survivors = self.leftovers()
        killed = []
        for p in survivors:
            try:
                killed.append(f"{p.pid} {' '.join(p.cmdline())[:200]}")
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(survivors, timeout=10)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        return killed

    def drop(self) -> None:
        """Remove this run's database and broker keys."""
        _admin_sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{self.places.database}'")
        _admin_sql(f'DROP DATABASE IF EXISTS "{self.places.database}"')
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{self.places.key_prefix}*"))
        if keys:
            client.delete(*keys)

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_path(name)
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    # ---- the metadata database and the REST API ----
    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        import psycopg2

        dsn = self.places.sql_alchemy_conn.replace("+psycopg2", "", 1)
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

    def token(self) -> str:
        import requests

        if not self._token:
            resp = requests.post(f"{self.base_url}/auth/token",
                                 json={"username": self.username, "password": self.password}, timeout=30)
            resp.raise_for_status()
            self._token = resp.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        import requests

        resp = requests.request(method, f"{self.base_url}/api/v2{path}", timeout=60,
                                headers={"Authorization": f"Bearer {self.token()}"}, **kwargs)
        if resp.status_code >= 300:
            raise RuntimeError(f"{method} {path} -> {resp.status_code}: {resp.text[:2000]}")
        return resp.json() if resp.content else None


def _accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _admin_sql(statement: str) -> None:
    import psycopg2

    conn = psycopg2.connect(POSTGRES_ADMIN_DSN)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


def wait_until(what: str, check: Callable[[], Any], timeout: float, interval: float = 1.0,
               alive: Callable[[], None] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive:
            alive()
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def main() -> int:
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="mtc-topology-"))
    topology = Topology(root)
    try:
        topology.start()
        print(json.dumps({"url": topology.base_url, "username": topology.username, "password": topology.password,
                          "root": str(root), "processes": {n: p.pid for n, p in topology.procs.items()}}, indent=1))
        print("Ctrl-C stops it", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        killed = topology.stop()
        topology.drop()
        if killed:
            print("killed after the stop timeout:", *killed, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
