"""Benchmark 3: sensing cost. Requests and time per poke of our checkpoint stores vs a naive recursive listing.

For 10, 1,000 and 100,000 Orbax step directories (4 objects each, the commit marker among them, plus one
in-flight `.orbax-checkpoint-tmp`), and as many GKE MTC replicator backups (a `.meta` and a data object per
step), against a GCS listing server and a local directory:

- ours: `open_store(dir)` — GCS: one matchGlob listing of the commit markers, then, once a step is known, a
  startOffset listing of same-length step names plus a listing of longer step names; local: one scandir plus
  a stat per new step. Backups: a `**.meta` matchGlob listing.
- naive: list every object under the prefix (GCS) / `os.walk` the directory (local), then the same parsing.

The GCS side is the GCS double, `tests/doubles/gcs.py`: `objects.list` with paging (1,000 entries a page),
`startOffset` and `matchGlob` as GCS documents them, driven by the real client through `GCSHook`; every request
and every entry in the table is one the server answered (observed, not modelled). Its seconds are this
server's Python work on a loaded machine; on GCS each request is a network round trip.

    python -m benchmarks.sensing_cost [--quick]
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.common import REPO, argument_parser, interleaved, median, print_table, ratio, result_path, write_result

from tests.doubles.gcs import GcsDouble
from mtc_provider.adapters.checkpoint_stores import GcsCheckpointStore, open_store
from mtc_provider.core.measure.listing import complete_backups, data_complete, finalized_from_objects

BUCKET = "bench"
CONN_ID = "mtc_bench_gcs"
ORBAX_FILES = ("_CHECKPOINT_METADATA", "default/manifest.ocdbt", "default/d/0", "commit_success.txt")
PAGE = 1000


def step_objects(prefix: str, count: int) -> list[str]:
    names = [f"{prefix}/{step}/{name}" for step in range(1, count + 1) for name in ORBAX_FILES]
    return names + [f"{prefix}/{count + 1}.orbax-checkpoint-tmp/default/d/0"]


def backup_objects(prefix: str, count: int) -> list[str]:
    """MTC replicator backups of the job named by `prefix`'s last part, one node: per step a time folder holding
    the node's `.meta` and one object of its data folder."""
    job = prefix.rsplit("/", 1)[-1]
    names = []
    for step in range(1, count + 1):
        folder = f"{prefix}/2026-12-{1 + step // 1440:02d}_{step // 60 % 24:02d}-{step % 60:02d}"
        names += [f"{folder}/{job}-s{step}-n0-w0.meta", f"{folder}/D{step:08x}.data/0"]
    return names


def newest_backup_from_names(names: list[str], prefix: str) -> int | None:
    """The naive way: every object under the backup folder listed, then the same rules applied to the names."""
    relative = [name[len(prefix) + 1:] for name in names]
    complete = complete_backups(((name, 1) for name in relative if name.endswith(".meta")),
                                prefix.rsplit("/", 1)[-1], 1)
    for step in sorted(complete, reverse=True):
        if all(data_complete(count, {name.split("/")[1] for name in relative if name.startswith(f"{folder}/")
                                     and name.count("/") > 1})
               for folder, count in complete[step].items()):
            return step
    return None


def gcs_poke(gcs: GcsDouble, fn: Callable[[], Any]) -> dict[str, Any]:
    """One poke: wall time, the listing requests the server answered (one per page) and the entries served."""
    gcs.reset()
    t0 = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - t0
    listings = list(gcs.listings)
    return {"seconds": seconds, "http_requests": len(listings), "gcs_entries": sum(r.items for r in listings),
            "start_offset_requests": sum(1 for r in listings if "startOffset" in r.params),
            "requests_by_glob": _by_glob(listings), "found": value}


def _by_glob(listings: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in listings:
        key = r.params.get("matchGlob", "(none)").rsplit("/", 2)[-2:]
        out["/".join(key)] = out.get("/".join(key), 0) + 1
    return out


def naive_gcs_list(client: Any, prefix: str) -> list[str]:
    return [blob.name for blob in client.list_blobs(BUCKET, prefix=prefix + "/", page_size=PAGE)]


def measure_gcs(gcs: GcsDouble, count: int, repeats: int) -> dict[str, Any]:
    prefix, backups = f"run{count}/checkpoints", f"backups{count}/train"
    t0 = time.perf_counter()
    gcs.seed(BUCKET, step_objects(prefix, count) + backup_objects(backups, count))
    seed_s = time.perf_counter() - t0
    directory, backup_dir = f"gs://{BUCKET}/{prefix}", f"gs://{BUCKET}/{backups}"
    store = GcsCheckpointStore(CONN_ID)
    client = store.hook.get_conn()
    store.finalized(directory)  # warm-up, not measured: the client's one-time bucket lookup
    naive_gcs_list(client, prefix)

    def ours_first():
        return gcs_poke(gcs, lambda: len(store.finalized(directory)))

    def ours_next():
        return gcs_poke(gcs, lambda: len(store.finalized(directory, after=count)))

    def naive():
        return gcs_poke(gcs, lambda: len(finalized_from_objects(naive_gcs_list(client, prefix), prefix)))

    def ours_backup():
        return gcs_poke(gcs, lambda: store.newest_backup(backup_dir, 1))

    def naive_backup():
        return gcs_poke(gcs, lambda: newest_backup_from_names(naive_gcs_list(client, backups), backups))

    runs = interleaved({"ours_first": ours_first, "ours_next": ours_next, "naive": naive,
                        "ours_backup": ours_backup, "naive_backup": naive_backup}, repeats)
    for name, expected in (("ours_first", count), ("ours_next", 0), ("naive", count),
                           ("ours_backup", count), ("naive_backup", count)):
        found = {run["found"] for run in runs[name]}
        if found != {expected}:
            raise AssertionError(f"gcs {count}: {name} found {found}, expected {expected}")
    return {"dirs": count, "objects": len(ORBAX_FILES) * count + 1 + 2 * count, "seed_s": round(seed_s, 2),
            "arms": {name: _summary(values) for name, values in runs.items()}}


def _summary(values: list[dict[str, Any]]) -> dict[str, Any]:
    first = values[0]
    out = {key: first[key] for key in first if key not in ("seconds", "found")}
    for key in ("http_requests", "fs_calls"):
        if key in first:
            out[f"{key}_per_repeat"] = [v[key] for v in values]
    out["seconds_median"] = median([v["seconds"] for v in values])
    out["seconds"] = [round(v["seconds"], 6) for v in values]
    return out


# ---- local directory ----------------------------------------------------------------------------------------
class FsCalls:
    """Counts os.scandir and os.stat calls (os.walk goes through os.scandir too) while active."""

    def __init__(self) -> None:
        self.scandir = self.stat = 0

    def __enter__(self) -> "FsCalls":
        self._scandir, self._stat = os.scandir, os.stat

        def scandir(*args, **kwargs):
            self.scandir += 1
            return self._scandir(*args, **kwargs)

        def stat(*args, **kwargs):
            self.stat += 1
            return self._stat(*args, **kwargs)

        os.scandir, os.stat = scandir, stat
        return self

    def __exit__(self, *exc) -> None:
        os.scandir, os.stat = self._scandir, self._stat


def make_local_tree(root: Path, count: int) -> None:
    for step in range(1, count + 1):
        data = root / str(step) / "default" / "d"
        data.mkdir(parents=True)
        for name in ORBAX_FILES:
            (root / str(step) / name).write_bytes(b"x")
    (root / f"{count + 1}.orbax-checkpoint-tmp" / "default").mkdir(parents=True)


def naive_walk(root: Path) -> list[int]:
    """Every directory and file under root, then the same rule: `<step>/commit_success.txt`."""
    names = [os.path.relpath(os.path.join(top, f), root) for top, _dirs, files in os.walk(root) for f in files]
    return finalized_from_objects(names)


def local_poke(fn: Callable[[], Any]) -> dict[str, Any]:
    with FsCalls() as calls:
        t0 = time.perf_counter()
        value = fn()
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "fs_calls": calls.scandir + calls.stat, "scandir": calls.scandir,
            "stat": calls.stat, "found": value}


def measure_local(scratch: Path, count: int, repeats: int) -> dict[str, Any]:
    root = scratch / f"run{count}" / "checkpoints"
    t0 = time.perf_counter()
    make_local_tree(root, count)
    seed_s = time.perf_counter() - t0
    store = open_store(str(root))
    runs = interleaved({
        "ours_first": lambda: local_poke(lambda: len(store.finalized(str(root)))),
        "ours_next": lambda: local_poke(lambda: len(store.finalized(str(root), after=count))),
        "naive": lambda: local_poke(lambda: len(naive_walk(root))),
    }, repeats)
    for name, expected in (("ours_first", count), ("ours_next", 0), ("naive", count)):
        found = {run["found"] for run in runs[name]}
        if found != {expected}:
            raise AssertionError(f"local {count}: {name} found {found}, expected {expected}")
    shutil.rmtree(root.parent, ignore_errors=True)
    return {"dirs": count, "seed_s": round(seed_s, 2), "arms": {name: _summary(v) for name, v in runs.items()}}


# ---- run --------------------------------------------------------------------------------------------------
def run(counts: list[int], repeats: int, local_counts: list[int] | None = None) -> dict[str, Any]:
    gcs_results, local_results = [], []
    # An anonymous google_cloud_platform connection: GCSHook then talks to STORAGE_EMULATOR_HOST.
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True}})
    with GcsDouble() as gcs:
        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url  # GCSHook's client then talks to the listing server
        for count in counts:
            gcs_results.append(measure_gcs(gcs, count, repeats if count < 100_000 else max(2, repeats // 2)))
            print(f"gcs {count}: done", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="mtc-bench-sensing-"))
    try:
        for count in (counts if local_counts is None else local_counts):
            local_results.append(measure_local(scratch, count, repeats))
            print(f"local {count}: done", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"gcs": gcs_results, "local": local_results, "ratios": ratios(gcs_results, local_results)}


def ratios(gcs_results: list[dict], local_results: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {"gcs": {}, "local": {}}
    for item in gcs_results:
        arms = item["arms"]
        out["gcs"][str(item["dirs"])] = {
            "time_first_over_naive": ratio(arms["ours_first"]["seconds_median"], arms["naive"]["seconds_median"]),
            "time_next_over_naive": ratio(arms["ours_next"]["seconds_median"], arms["naive"]["seconds_median"]),
            "entries_first_over_naive": ratio(arms["ours_first"]["gcs_entries"], arms["naive"]["gcs_entries"]),
            "requests_first_over_naive": ratio(arms["ours_first"]["http_requests"], arms["naive"]["http_requests"]),
            "requests_next_over_naive": ratio(arms["ours_next"]["http_requests"], arms["naive"]["http_requests"]),
            "time_backup_over_naive": ratio(arms["ours_backup"]["seconds_median"],
                                            arms["naive_backup"]["seconds_median"]),
            "requests_backup_over_naive": ratio(arms["ours_backup"]["http_requests"],
                                                arms["naive_backup"]["http_requests"]),
        }
    for item in local_results:
        arms = item["arms"]
        out["local"][str(item["dirs"])] = {
            "time_first_over_naive": ratio(arms["ours_first"]["seconds_median"], arms["naive"]["seconds_median"]),
            "time_next_over_naive": ratio(arms["ours_next"]["seconds_median"], arms["naive"]["seconds_median"]),
            "fs_calls_first_over_naive": ratio(arms["ours_first"]["fs_calls"], arms["naive"]["fs_calls"]),
            "fs_calls_next_over_naive": ratio(arms["ours_next"]["fs_calls"], arms["naive"]["fs_calls"]),
        }
    return out


def report(result: dict[str, Any]) -> None:
    rows = []
    for item in result["gcs"]:
        for name, arm in item["arms"].items():
            rows.append([f"gcs {item['dirs']}", name, arm["http_requests"], arm["start_offset_requests"],
                         json.dumps(arm["requests_by_glob"]), arm["gcs_entries"], arm["seconds_median"]])
    print_table("Sensing cost, GCS listing server (per poke, observed)", ["dirs", "arm", "requests",
                "with startOffset", "requests by matchGlob", "entries", "median s"], rows)
    rows = [[f"local {item['dirs']}", name, arm["fs_calls"], arm["scandir"], arm["stat"], arm["seconds_median"]]
            for item in result["local"] for name, arm in item["arms"].items()]
    print_table("Sensing cost, local directory (per poke)", ["dirs", "arm", "fs calls", "scandir", "stat", "median s"],
                rows)
    print_table("Ratios (ours / naive)", ["where", "ratios"],
                [[f"{kind} {dirs}", ", ".join(f"{k}={v:.4f}" for k, v in values.items() if v is not None)]
                 for kind in ("gcs", "local") for dirs, values in result["ratios"][kind].items()])


def main() -> None:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--counts", default=None, help="comma-separated step-directory counts (default 10,1000,100000)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--local-counts", default=None,
                        help="step counts for the local directory (default: --counts); 100,000 steps are 700,000 "
                             "files, which take minutes to create on a loaded machine")
    args = parser.parse_args()
    default_counts = [10, 300] if args.quick else [10, 1000, 100_000]
    counts = [int(c) for c in args.counts.split(",")] if args.counts else default_counts
    repeats = args.repeats or (2 if args.quick else 5)
    local_counts = [int(c) for c in args.local_counts.split(",")] if args.local_counts else None
    result = run(counts, repeats, local_counts)
    result["parameters"] = {"counts": counts, "local_counts": local_counts or counts, "repeats": repeats, "orbax_files_per_step": len(ORBAX_FILES),
                            "backup_objects_per_step": 2, "gcs_page_size": PAGE,
                            "gcs_server": "tests/doubles/gcs.py (startOffset, matchGlob, 1,000-entry pages)"}
    report(result)
    path = write_result(result_path("sensing_cost", args.quick, args.output), "sensing_cost", result)
    print(f"result: {path}")


if __name__ == "__main__":
    main()
