"""Benchmark 2c: the provider's own part of an Airflow retry on the local target: try 2's `execute`, in a fresh
Python process as Airflow's task process runs it (every client library imported cold), from its call to the next
JobSet's create (the deferral that follows it).

Each repetition: try 1 of a run launches (deferrable: it submits its JobSet and defers), the runner SIGKILLs a host
(exit 137, `maxRestarts: 0`), the JobSet fails; then one arm runs in a new process that first imports the operator
module (what the DAG file's import does in a task process). Arms, alternated (ABBA) in one run:

- ``ours``: try 2's `execute` as shipped;
- ``client_per_request``: the same with one Kubernetes client (one token, one TLS connection) per request, as
  before the sync api shared one;
- ``floor``: what any retry of this run pays in that process, whatever the provider does: one run-lock read
  through the operator's hook and one checkpoint listing through its store (each client's cold imports and one
  request each);
- ``before`` (with ``--before TREE``): ``ours`` with the provider and the local target of another tree (e.g.
  ``git archive main provider rehearsal | tar -x -C TREE``), so a change is measured against its base in one run;
  its rounds run in a second home whose API server, runner and local GCS are that tree's too (the servers' own
  answer times are part of what a change to the local target can move).

Reported, medians: the run lock's acquire (the checkpoint claim and the run lock), the checkpoint store's
construction, the listing, the time from the call to the next JobSet's create (``to_create``: what kill -> next
JobSet waits for), the whole `execute`, requests and clients made, and the same acquire again by a later
try in that process (``acquire_warm``: imports warm, four requests) beside one bare warm request on the same
client (``roundtrip``: a read of the run lock, median of 5), so ``acquire_warm / roundtrip`` says how many round
trips the acquire costs; ratios ours / floor (what the provider adds to the unavoidable part), ours /
client_per_request and ours / before. The deployment id is set
(``[mtc] deployment_id``): in a task it is one Execution API call, measured by ``resubmission_e2e --profile``.

    python -m benchmarks.retry_setup [--repeats 4] [--before TREE] [--quick]
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from typing import Any, Iterator, Mapping

from benchmarks.common import NAMESPACE, REPO, argument_parser, local_runner, median, print_table, ratio, \
    result_path, write_result

NAME = "retry_setup"
ARMS = ("ours", "client_per_request", "floor")
DAG_ID, TASK_ID = "bench_retry_setup", "train"
SLEEPER = ["python3", "-c", "import time; time.sleep(600)"]
GOAL_S = 1.0  # the provider's own part of a retry (issue: under 1 s)
ENV = {"AIRFLOW__MTC__DEPLOYMENT_ID": "bench-retry-setup"}


class _TI:
    """The task instance fields the operator reads; XComs go to a dict."""

    def __init__(self, run: str, try_number: int) -> None:
        self.dag_id, self.task_id, self.run_id, self.try_number = DAG_ID, TASK_ID, run, try_number
        self.map_index, self.max_tries = -1, 3
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value") -> Any:
        return self.xcoms.get(key)


def operator(home: str, run: str) -> Any:
    from mtc_provider.operators.jobset import MtcJobSetOperator

    return MtcJobSetOperator(
        task_id=TASK_ID,
        slices={"tpu_type": "v6e", "topology": "2x2", "num_slices": 2, "machine_type": "ct6e-standard-4t"},
        checkpointing={"run_name": run, "base_output_directory": f"{home}/buckets/mtc-bench", "steps": 10},
        workload={"jobset_name": run, "image": "local", "command": SLEEPER, "namespace": NAMESPACE,
                  "max_restarts": 0, "termination_grace_period_seconds": 5},
        target={"kind": "local", "home": home},
        fault_plan=[{"kind": "sigkill_host", "at_seconds": 1.0, "slice": 1, "host": 0}],
        poll_interval=2.0, deferrable=True, retries=2,
    )


# ---- in the fresh process ---------------------------------------------------------------------------------------
class _Spans:
    """Seconds spent in a few calls (the outermost call only: the claim's acquire runs inside the run lock's)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.requests = 0
        self._depth: dict[str, int] = {}

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        fn = getattr(owner, attribute)

        def spanned(*args: Any, **kwargs: Any) -> Any:
            depth = self._depth.get(name, 0)
            self._depth[name] = depth + 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth[name] = depth
                if depth == 0:
                    self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

        setattr(owner, attribute, spanned)


def child(arm: str, home: str, run: str) -> dict[str, Any]:
    """One arm in this (fresh) process: the seconds of its spans, its requests and clients."""
    started = time.perf_counter()
    from mtc_provider.operators import jobset as module  # the DAG file's import

    imported = time.perf_counter() - started
    from mtc_provider.adapters import kubernetes, run_lock

    spans = _Spans()
    spans.wrap(run_lock.RunLock, "acquire", "acquire")
    spans.wrap(module.MtcJobSetOperator, "_store", "store")
    spans.wrap(module.MtcJobSetOperator, "_latest", "listing")
    call = kubernetes.KubernetesJobSetApi._call

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        spans.requests += 1
        return call(self, *args, **kwargs)

    kubernetes.KubernetesJobSetApi._call = counted
    created: list[float] = []  # when the next JobSet's create was sent: what a retry's kill -> next JobSet waits for
    create = kubernetes.KubernetesJobSetApi.create

    def timed_create(self: Any, *args: Any, **kwargs: Any) -> Any:
        created.append(time.perf_counter())
        return create(self, *args, **kwargs)

    kubernetes.KubernetesJobSetApi.create = timed_create
    if arm == "client_per_request":
        init = kubernetes.KubernetesJobSetApi.__init__

        def per_request(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            self.client_reuse_seconds = 0.0

        kubernetes.KubernetesJobSetApi.__init__ = per_request
    op = operator(home, run)
    ti = _TI(run, 2)
    start = time.perf_counter()
    if arm == "floor":
        from mtc_provider.core.basics import labels as L

        op.hook.api.get_lock(NAMESPACE, L.lock_name(run))
        directory = op._specs(ti)[1].checkpoint_directory
        op._latest(op._store(directory), directory)
    else:
        from airflow.sdk.exceptions import TaskDeferred

        try:
            op.execute({"ti": ti, "run_id": run})
            raise RuntimeError("try 2 did not defer on its next JobSet")
        except TaskDeferred:
            pass
    spans.seconds["execute"] = time.perf_counter() - start
    if created:
        spans.seconds["to_create"] = created[0] - start
    if arm != "floor":  # the same claim and lock taken again by a later try, imports warm: the requests alone
        from mtc_provider.core.attempt.ownership import task_owner
        from mtc_provider.core.basics import labels as L

        cold, requests = dict(spans.seconds), spans.requests
        again = op.hook.run_lock(NAMESPACE, run, L.run_labels(DAG_ID, run, TASK_ID, run), task_owner(_TI(run, 3)))
        directory = op._specs(ti)[1].checkpoint_directory
        start = time.perf_counter()
        again.acquire(checkpoint_dir=directory)
        warm = time.perf_counter() - start
        trips = []
        for _ in range(5):  # one bare request on the same (shared, warm) client: what one round trip costs here
            start = time.perf_counter()
            op.hook.api.get_lock(NAMESPACE, L.lock_name(run))
            trips.append(time.perf_counter() - start)
        spans.seconds, spans.requests = {**cold, "acquire_warm": warm, "roundtrip": median(trips)}, requests
    return {"arm": arm, "import_s": imported, **{f"{k}_s": v for k, v in spans.seconds.items()},
            "requests": spans.requests,
            "clients": getattr(op.hook.api, "clients_opened", None)}  # None: a provider without the count


# ---- the driver -------------------------------------------------------------------------------------------------
def _run_child(arm: str, home: str, run: str, before: str | None = None) -> dict[str, Any]:
    env = {**os.environ, **ENV}
    if arm == "before":  # the other tree's provider and local target first on the path; this benchmark's code
        env["PYTHONPATH"] = os.pathsep.join([f"{before}/provider", f"{before}/rehearsal", str(REPO)])
    done = subprocess.run([sys.executable, "-m", "benchmarks.retry_setup", "--child",  # noqa: S603
                           "ours" if arm == "before" else arm, home, run],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{arm} {run} failed:\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "arm": arm}


@contextlib.contextmanager
def servers_of(tree: str | None) -> Iterator[None]:
    """Within: the processes this one starts (a home's API server and runner, its local GCS) run `tree`'s provider
    and local target (this tree's when None)."""
    if not tree:
        yield
        return
    kept = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([f"{tree}/provider", f"{tree}/rehearsal", str(REPO)])
    try:
        yield
    finally:
        if kept is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = kept


def _start_servers(api: Any, tree: str | None) -> None:
    """Start the home's API server (and runner) and its local GCS now, from `tree`."""
    from mtc_local.target.gcs import local_gcs_endpoint

    with servers_of(tree):
        api.kubeconfig  # noqa: B018 - started when it does not answer
        local_gcs_endpoint(str(api.home.root))


def _try_one_failed(api: Any, home: str, run: str) -> None:
    """Try 1 submits and defers; its JobSet then fails (the runner's kill)."""
    from airflow.sdk.exceptions import TaskDeferred

    try:
        operator(home, run).execute({"ti": _TI(run, 1), "run_id": run})
    except TaskDeferred:
        pass
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(o.get("status", {}).get("terminalState") == "Failed" for o in api.list(NAMESPACE)
               if o["metadata"]["name"].startswith(run)):
            return
        time.sleep(0.1)
    raise TimeoutError(f"try 1 of {run} did not fail")


def order(repeats: int, arms: tuple[str, ...] = ARMS) -> list[str]:
    """ABBA over the arms: each round reverses the last, so drift hits every arm alike."""
    return [arm for index in range(repeats) for arm in (arms if index % 2 == 0 else arms[::-1])]


def summarize(samples: list[Mapping[str, Any]]) -> dict[str, Any]:
    arms: dict[str, Any] = {}
    for arm in dict.fromkeys(s["arm"] for s in samples):
        mine = [s for s in samples if s["arm"] == arm]
        keys = dict.fromkeys(k for s in mine for k in s if k != "arm")
        arms[arm] = {"n": len(mine), **{k: median([s.get(k) for s in mine]) for k in keys}}
    execute = {arm: values.get("execute_s") for arm, values in arms.items()}
    ours = execute.get("ours")
    mine = arms.get("ours", {})
    spans = {f"{span}_ours_over_{arm}": ratio(mine.get(f"{span}_s"), values.get(f"{span}_s"))
             for span in ("acquire", "acquire_warm") for arm, values in arms.items()
             if arm != "ours" and values.get(f"{span}_s") is not None}
    trips = {arm: ratio(values.get("acquire_warm_s"), values.get("roundtrip_s")) for arm, values in arms.items()
             if values.get("roundtrip_s")}
    return {"arms": arms, **{f"ours_over_{arm}": ratio(ours, seconds) for arm, seconds in execute.items()
                             if arm != "ours"}, **spans, "acquire_warm_over_roundtrip": trips,
            "goal_s": GOAL_S, "goal_met": ours is not None and ours < GOAL_S}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(child(*argv[1:4])))
        return {}
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4, help="rounds (each runs every arm once)")
    parser.add_argument("--before", help="a tree with the provider/ and rehearsal/ to compare with (arm `before`)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    os.environ.update(ENV)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    samples = []
    with contextlib.ExitStack() as stack:
        apis = {"ours": stack.enter_context(local_runner("retry-setup"))[0]}
        _start_servers(apis["ours"], None)
        if args.before:
            apis["before"] = stack.enter_context(local_runner("retry-setup-before"))[0]
            _start_servers(apis["before"], args.before)
        for index, arm in enumerate(order(args.repeats, ARMS + ("before",) if args.before else ARMS)):
            api = apis.get(arm, apis["ours"])
            home, run = str(api.home.root), f"rs{index}"
            _try_one_failed(api, home, run)
            samples.append(_run_child(arm, home, run, args.before))
            print(f"{arm:19s} #{index}: " + " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                     for k, v in samples[-1].items() if k != "arm"), flush=True)
            for obj in api.list(NAMESPACE):
                api.delete(NAMESPACE, obj["metadata"]["name"], timeout=60)
    result = {"quick": args.quick, "parameters": {"repeats": args.repeats, "before": args.before},
              "load_average_at_start": load_at_start,
              "load_average_at_end": [round(x, 2) for x in os.getloadavg()], **summarize(samples),
              "samples": samples}
    columns = ["acquire_s", "store_s", "listing_s", "to_create_s", "execute_s", "requests", "clients",
               "acquire_warm_s", "roundtrip_s"]
    print_table("Try 2's execute in a fresh process (medians)", ["arm", "n", *columns],
                [[arm, s["n"], *(s.get(c) for c in columns)] for arm, s in result["arms"].items()])
    print("; ".join(f"{key.replace('_over_', ' / ')} {value:.2f}" for key, value in result.items()
                    if key.startswith("ours_over_") and value is not None)
          + f"; goal under {GOAL_S} s: {'met' if result['goal_met'] else 'missed'}")
    print("; ".join([f"{key.replace('_ours_over_', ' ours / ')} {value:.2f}" for key, value in result.items()
                     if "_ours_over_" in key and value is not None]
                    + [f"{arm}: warm acquire / round trip {value:.1f}"
                       for arm, value in result["acquire_warm_over_roundtrip"].items() if value is not None]))
    path = write_result(result_path(NAME, args.quick, args.output), NAME, result)
    print(f"result: {path}")
    return result


if __name__ == "__main__":
    main()
