"""The detached supervisor: owns the pods of every JobSet in one home, so they outlive the task that made them.

Started on demand by the client (`python -m mtc_provider.local.runner.supervisor <home>`, in a new session);
one per home, enforced by an flock on <home>/supervisor.lock. It serves create/delete on a socket bound to
MTC_RUNNER_BIND_HOST (default 127.0.0.1; 0.0.0.0 in docker-compose.yaml, where other containers share the home)
(a nonce line out, one signed JSON line in, one signed line out: see auth.py; a request not signed with the
home's token is refused and runs nothing), writes every JobSet object to <home>/state/ (the only writer; clients read the files
directly for get/list/watch), and exits by itself after MTC_RUNNER_IDLE_SECONDS with no active JobSet.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Any

from mtc_provider.core.errors import SpecError
from mtc_provider.local.runner import auth
from mtc_provider.local.runner.jobset import JobSetRun
from mtc_provider.local.runner.manifest import LOG_DIR_ANNOTATION
from mtc_provider.local.runner.state import Home, read_json, recv_line, write_json

TICK_SECONDS = 0.1
IDLE_SECONDS = float(os.environ.get("MTC_RUNNER_IDLE_SECONDS", "60"))
DEFAULT_BIND_HOST = "127.0.0.1"


def bind_host() -> str:
    return os.environ.get("MTC_RUNNER_BIND_HOST") or DEFAULT_BIND_HOST


def advertised_host(bound: str) -> str:
    """The address clients connect to (written to supervisor.json): MTC_RUNNER_ADVERTISE_HOST, else the bound
    address, else (bound to every interface) this machine's host name, as other containers resolve it."""
    if os.environ.get("MTC_RUNNER_ADVERTISE_HOST"):
        return os.environ["MTC_RUNNER_ADVERTISE_HOST"]
    return socket.gethostname() if bound == "0.0.0.0" else bound


class Supervisor:
    def __init__(self, home: Home) -> None:
        self.home = home
        self.lock = threading.Lock()
        self.runs: dict[tuple[str, str], JobSetRun] = {}
        self.closing = False

    def recover(self) -> None:
        """Adopt JobSets a previous supervisor left unfinished (it died, or it was killed)."""
        for path in self.home.jobset_files():
            obj = read_json(path)
            if not obj or (obj.get("status") or {}).get("terminalState") and not obj["metadata"].get(
                "deletionTimestamp"
            ):
                continue
            created = (read_json(path.with_name(path.stem + ".pods.json")) or {}).get("created", time.time())
            try:
                run = JobSetRun(self.home, obj, created)
            except (SpecError, KeyError) as err:  # a damaged state file must not stop the other JobSets
                print(f"skipping {path}: {err}", flush=True)
                continue
            print(f"recovering {run.namespace}/{run.name}", flush=True)
            run.recover()
            self.runs[(run.namespace, run.name)] = run

    # ---- requests (called under self.lock) -------------------------------------------------------
    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.closing:
            return {"retry": True}
        if request.get("home") != str(self.home.root):
            return {"error": {"status": 421, "message": f"this supervisor serves {self.home.root}"}}
        op = request.get("op")
        if op == "ping":
            return {"ok": os.getpid()}
        if op == "create":
            return self._create(request["namespace"], request["body"])
        if op == "delete":
            return self._delete(request["namespace"], request["name"])
        return {"error": {"status": 400, "message": f"unknown op {op!r}"}}

    def _create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        path = self.home.jobset_file(namespace, name)
        if path.exists():
            return {"error": {"status": 409, "message": f'jobsets.jobset.x-k8s.io "{name}" already exists'}}
        obj = json.loads(json.dumps(body))
        obj.setdefault("apiVersion", "jobset.x-k8s.io/v1alpha2")
        obj.setdefault("kind", "JobSet")
        meta = obj["metadata"]
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            generation=1,
            resourceVersion="0",
        )
        meta.setdefault("annotations", {})[LOG_DIR_ANNOTATION] = str(self.home.log_dir(namespace, name))
        obj["status"] = {}
        try:
            run = JobSetRun(self.home, obj, time.time())
        except SpecError as err:
            return {"error": {"status": 422, "message": str(err)}}
        # A new JobSet of an old name starts with no fault history and no ramdisk left from before.
        run.faults_file.unlink(missing_ok=True)
        run.fired = run.fired_in_run()
        run.start_all()
        run.save(None)
        self.runs[(namespace, name)] = run
        return {"ok": run.snapshot()}

    def _delete(self, namespace: str, name: str) -> dict[str, Any]:
        run = self.runs.get((namespace, name))
        if run is None:
            obj = read_json(self.home.jobset_file(namespace, name))
            if obj is None:
                return {"ok": None}
            run = JobSetRun(self.home, obj, time.time())
            self.runs[(namespace, name)] = run
        previous = run.snapshot()
        run.request_delete()
        run.save(previous)
        self._finish_deletes()
        return {"ok": None}

    # ---- the reconcile loop ----------------------------------------------------------------------
    def _finish_deletes(self) -> None:
        for key, run in list(self.runs.items()):
            if run.finished_deleting():
                run.remove()
                del self.runs[key]

    def tick(self) -> None:
        now = time.time()
        for key, run in list(self.runs.items()):
            run.tick(now)
            if not run.active:
                del self.runs[key]  # terminal: the state file stays, nothing runs
        self._finish_deletes()

    def kill_everything(self) -> None:
        for run in self.runs.values():
            for pod in run.pods.values():
                pod.signal(signal.SIGKILL)


def _answer(conn: socket.socket, supervisor: Supervisor, token: bytes) -> dict[str, Any]:
    """One exchange: our nonce out, a request signed over it in, the answer signed over the client's nonce."""
    server_nonce = auth.nonce()
    conn.sendall(json.dumps({"nonce": server_nonce}).encode() + b"\n")
    envelope = json.loads(recv_line(conn) or b"null")
    if not isinstance(envelope, dict) or not auth.valid(
        token, "request", server_nonce, envelope.get("request"), envelope.get("mac")
    ):
        # Refused before the request is looked at: nothing runs for a caller that cannot read the token file.
        return {"error": {"status": 401, "message": "request not signed with this home's supervisor.token"}}
    with supervisor.lock:
        response = supervisor.handle(envelope["request"])
    client_nonce = str(envelope.get("nonce", ""))
    return {"response": response, "mac": auth.signature(token, "response", client_nonce, response)}


def _serve(server: socket.socket, supervisor: Supervisor, token: bytes) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return  # closed: the supervisor is exiting
        with conn:
            try:
                conn.settimeout(10)
                reply = _answer(conn, supervisor, token)
            except Exception as err:  # one bad client must not stop the supervisor
                reply = {"error": {"status": 500, "message": repr(err)}}
            try:
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass


def make_private(home: Home) -> None:
    """The home, its state, logs and faults, and its ramdisks: only their owner may read them (0700 / 0600)."""
    os.umask(0o077)  # every file and folder the supervisor and its pods create from now on is private
    auth.make_private_dir(home.root)
    for folder in (home.state_dir, home.root / "logs", home.root / "faults", home.shm_root):
        if folder.is_dir():  # left by an older version: tighten it (new ones are private through the umask)
            os.chmod(folder, auth.PRIVATE_DIR)


def main(home_arg: str) -> int:
    home = Home.of(home_arg)
    make_private(home)
    lock = open(home.lock_file, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another supervisor owns this home
    token = auth.ensure_token(home.root)
    supervisor = Supervisor(home)
    host = bind_host()
    server = socket.socket()
    server.bind((host, 0))
    server.listen(16)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with supervisor.lock:
        supervisor.recover()
    write_json(home.supervisor_file, {"pid": os.getpid(), "host": advertised_host(host),
                                      "port": server.getsockname()[1], "home": str(home.root)})
    threading.Thread(target=_serve, args=(server, supervisor, token), daemon=True).start()
    idle_since = time.time()
    try:
        while not stop.is_set():
            with supervisor.lock:
                supervisor.tick()
                if supervisor.runs:
                    idle_since = time.time()
                elif time.time() - idle_since > IDLE_SECONDS:
                    supervisor.closing = True
                    break
            stop.wait(TICK_SECONDS)
    finally:
        with supervisor.lock:
            supervisor.closing = True
            if stop.is_set():
                supervisor.kill_everything()  # stopped by a signal: leave nothing orphaned
        server.close()
        info = read_json(home.supervisor_file)
        if info and info.get("pid") == os.getpid():
            home.supervisor_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
