"""The workload's process: parse flags, find its identity, start the watchdog, train, exit with a code.

Run as ``python -m mtc_local.workload [base.yml] key=value ...``. JobSet variables
(``JOBSET_NAME``, ``REPLICATED_JOB_NAME``, ``JOB_INDEX``, ``JOB_COMPLETION_INDEX``) are recorded in
the start event.
"""

from __future__ import annotations

import os
import sys
import traceback

from mtc_provider.core.basics import vocabulary as V
from mtc_provider.adapters.workload_events import events_path
from mtc_local.workload.flags import EXIT_BAD_CONFIG, EXIT_RETRYABLE, FlagError
from mtc_local.workload.identity import configure
from mtc_local.workload.training import Watchdog, Workload


def main(argv: list[str] | None = None) -> int:
    configured = configure(list(sys.argv[1:] if argv is None else argv))
    if isinstance(configured, int):
        return configured
    cfg, ident = configured
    if cfg.enable_multi_tier_checkpointing:  # before any side effect: the JAX workload has no such mode
        print("error: flag enable_multi_tier_checkpointing: bad value True; allowed: False for the JAX workload "
              "(multi-tier mode is rehearsed by python -m mtc_local.light_workload)", file=sys.stderr, flush=True)
        return EXIT_BAD_CONFIG
    base = cfg.base_output_directory if "://" not in cfg.base_output_directory else "/tmp/mtc-workload"
    events_file = cfg.events_file or events_path(base, cfg.run_name, ident.process_id)
    w = Workload(cfg, ident, events_file)

    def on_watchdog(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
        w.emit("error", step=w.current_step, reason="watchdog", message=msg)
        sys.stdout.flush()

    # A step may legitimately take step_time_ms longer than the collectives' timeout.
    w.watchdog = Watchdog(cfg.distributed_timeout_s + cfg.step_time_ms / 1000.0, on_watchdog).start()
    w.emit(
        "start",
        step=None,
        num_processes=ident.num_processes,
        num_slices=ident.num_slices,
        hosts_per_slice=ident.hosts_per_slice,
        identity_source=ident.source,
        jobset=os.environ.get(V.ENV_JOBSET_NAME),
        replicated_job=os.environ.get(V.ENV_REPLICATED_JOB_NAME),
        job_index=os.environ.get(V.ENV_JOB_INDEX),
        job_completion_index=os.environ.get(V.ENV_JOB_COMPLETION_INDEX),
        restart_attempt=os.environ.get(V.ENV_JOBSET_RESTART_ATTEMPT),
        pid=os.getpid(),
    )
    try:
        code = w.run()
    except FlagError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        w.emit("error", step=w.current_step, reason="config", message=str(e))
        code = EXIT_BAD_CONFIG
    except BaseException as e:  # noqa: BLE001 - every other failure is retryable
        traceback.print_exc()
        w.emit("error", step=w.current_step, reason=type(e).__name__, message=str(e)[:2000])
        code = EXIT_RETRYABLE
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: JAX/Orbax atexit hooks can block on dead peers.
    os._exit(code)

