"""The local JobSetApi / AsyncJobSetApi: reads go to the state files, writes go to the supervisor's socket.

Any process that knows the home directory sees the same JobSets: a retried task or a restarted triggerer
builds a new client from the home path alone (a primitive a trigger can carry). Writes are signed with the
home's token (readable by its owner only) and the supervisor's answers must be signed too (auth.py).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, AsyncIterator

from mtc_provider.adapters.protocols import AlreadyExists, ApiError, NotFound, WatchEvent
from mtc_provider.core.errors import require
from mtc_provider.local.runner import auth
from mtc_provider.local.runner.faults import parse_plan
from mtc_provider.local.runner.manifest import FAULT_PLAN_ANNOTATION, parse
from mtc_provider.local.runner.state import Home, read_json, read_jsonl, recv_line

START_TIMEOUT = 20.0
_RETRYABLE = (ConnectionError, socket.timeout, json.JSONDecodeError, FileNotFoundError)


def _matches(labels: dict[str, str], selector: str) -> bool:
    """Equality-based label selector (`k=v,k2=v2`; `k==v` and `k!=v` too)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.strip() not in labels:
            return False
    return True


class LocalJobSetApi:
    """JobSetApi over a local runner home directory (created on demand)."""

    def __init__(self, home: str) -> None:
        self.home = Home.of(home)
        self._spawned: subprocess.Popen[bytes] | None = None
        self._refused = ""  # why the last answer was not trusted, for the timeout message

    # ---- transport -------------------------------------------------------------------------------
    def _send(self, request: dict[str, Any]) -> dict[str, Any] | None:
        info = read_json(self.home.supervisor_file)
        try:
            token = auth.read_token(self.home.root)
        except auth.TokenError as err:
            raise ApiError(403, str(err), "Forbidden") from err
        if not info or token is None:
            return None
        request = {**request, "home": str(self.home.root)}
        client_nonce = auth.nonce()
        address = info.get("host") or "127.0.0.1"  # MTC_RUNNER_BIND_HOST of the supervisor (docker-compose.yaml)
        try:
            with socket.create_connection((address, int(info["port"])), timeout=30) as conn:
                server_nonce = str(json.loads(recv_line(conn))["nonce"])
                mac = auth.signature(token, "request", server_nonce, request)
                envelope = {"request": request, "nonce": client_nonce, "mac": mac}
                conn.sendall(json.dumps(envelope).encode() + b"\n")
                reply = json.loads(recv_line(conn))
        except (*_RETRYABLE, KeyError, TypeError):
            return None
        response = reply.get("response") if isinstance(reply, dict) else None
        if not auth.valid(token, "response", client_nonce, response, reply.get("mac") if response is not None else None):
            # Not our supervisor (a stale port now used by another program) or one holding another token.
            self._refused = f"{address}:{info['port']} did not answer as {self.home.root}'s supervisor: {reply!r:.200}"
            return None
        if response.get("retry") or (response.get("error") or {}).get("status") == 421:
            return None  # a supervisor that is exiting, or a stale port: start a fresh one
        return response

    def _spawn(self) -> None:
        from mtc_provider.local.cluster.lifecycle import spawn

        if self._spawned is not None and self._spawned.poll() is None:
            return
        self._spawned = spawn(self.home)

    def _call(self, request: dict[str, Any]) -> Any:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            response = self._send(request)
            if response is not None:
                break
            if time.monotonic() > deadline:
                why = f" ({self._refused})" if self._refused else ""
                raise ApiError(503, f"local runner supervisor for {self.home.root} did not answer{why}", "Unavailable")
            self._spawn()
            time.sleep(0.05)
        if self._spawned is not None and self._spawned.poll() is not None:
            self._spawned = None
        error = response.get("error")
        if error:
            if error["status"] == 409:
                raise AlreadyExists(error["message"])
            raise ApiError(error["status"], error["message"])
        return response["ok"]

    # ---- JobSetApi -------------------------------------------------------------------------------
    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        plan = parse(namespace, body)  # SpecError before any side effect, fault plan included
        parse_plan(
            ((body.get("metadata") or {}).get("annotations") or {}).get(FAULT_PLAN_ANNOTATION),
            plan.num_slices,
            plan.hosts_per_slice,
        )
        return self._call({"op": "create", "namespace": namespace, "body": body})

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        obj = read_json(self.home.jobset_file(namespace, name))
        if obj is None:
            raise NotFound(f'jobsets.jobset.x-k8s.io "{name}" not found in namespace {namespace!r}')
        return obj

    def list(self, namespace: str, label_selector: str = "") -> list[dict[str, Any]]:
        found = []
        for path in sorted((self.home.state_dir / namespace).glob("*.json")):
            if path.name.endswith(".pods.json"):
                continue
            obj = read_json(path)
            if obj and _matches(obj["metadata"].get("labels") or {}, label_selector):
                found.append(obj)
        return found

    def delete(self, namespace: str, name: str, timeout: float | None = None) -> None:
        """Delete and wait until every pod is gone (SIGTERM, SIGKILL after the grace period) and tmpfs is clean."""
        try:
            obj = self.get(namespace, name)
        except NotFound:
            return
        self._call({"op": "delete", "namespace": namespace, "name": name})
        grace = _grace(obj)
        deadline = time.monotonic() + (grace + 30 if timeout is None else timeout)
        path = self.home.jobset_file(namespace, name)
        while path.exists():
            if time.monotonic() > deadline:
                raise ApiError(504, f"JobSet {namespace}/{name} still terminating", "Timeout")
            time.sleep(0.05)

    # ---- local extras ----------------------------------------------------------------------------
    def faults(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Injected faults of the JobSet so far: kind, slice, host, ts (unix), time, step, restart, pids."""
        return read_jsonl(self.home.faults_file(namespace, name))

    def run_faults(self, namespace: str, run_name: str) -> list[dict[str, Any]]:
        """Faults fired for a whole training run, across its resubmitted JobSets (each record names its JobSet)."""
        return read_jsonl(self.home.faults_file(namespace, f"run-{run_name}"))

    def pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The current attempt's pods: name, slice, host, processId, pid, restart, log, ramdisk, exitCode, step."""
        return (read_json(self.home.pods_file(namespace, name)) or {}).get("pods", [])

    def log_dir(self, namespace: str, name: str) -> Path:
        return self.home.log_dir(namespace, name)


def _grace(obj: dict[str, Any]) -> float:
    graces = [
        ((rj.get("template") or {}).get("spec") or {}).get("template", {}).get("spec", {}).get(
            "terminationGracePeriodSeconds", 30
        )
        for rj in obj.get("spec", {}).get("replicatedJobs", [])
    ]
    return float(max(graces, default=30))


class AsyncLocalJobSetApi:
    """AsyncJobSetApi for triggers: rebuilt from the home path; blocking work runs in a thread."""

    def __init__(self, home: str, poll_interval: float = 1.0) -> None:
        require(poll_interval > 0, "poll_interval", poll_interval, "a number of seconds > 0")
        self.home = home
        self.poll_interval = poll_interval
        self._sync = LocalJobSetApi(home)

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return await asyncio.to_thread(self._sync.get, namespace, name)

    async def delete(self, namespace: str, name: str) -> None:
        await asyncio.to_thread(self._sync.delete, namespace, name)

    async def watch(
        self, namespace: str, name: str, resource_version: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Poll the state file: ADDED first (no resource_version given), MODIFIED on every new
        resourceVersion, DELETED once the JobSet is gone (then the watch ends). NotFound if absent at start."""
        obj = await self.get(namespace, name)
        seen = obj["metadata"]["resourceVersion"]
        if resource_version is None:
            yield WatchEvent("ADDED", obj)
        elif int(seen) > int(resource_version):
            yield WatchEvent("MODIFIED", obj)
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                current = await self.get(namespace, name)
            except NotFound:
                yield WatchEvent("DELETED", obj)
                return
            if current["metadata"]["resourceVersion"] != seen:
                obj, seen = current, current["metadata"]["resourceVersion"]
                yield WatchEvent("MODIFIED", obj)
