"""The training loop: JAX distributed set-up, the sharded train state, steps, saves, preemption and finish.

Step numbering: step N is the state after N optimizer updates; a checkpoint named N restores that
state and training continues with update N+1. Each update prints
``completed step: N, seconds: X, loss: Y``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from typing import Any, Callable

from mtc_local.workload import model
from mtc_local.workload.checkpointing import Checkpointer
from mtc_local.workload.flags import EXIT_OK, EXIT_RETRYABLE, Config, FlagError
from mtc_local.workload.identity import Identity
from mtc_provider.adapters.workload_events import append_event


class Watchdog:
    """``os._exit(42)`` when :meth:`beat` has not been called for ``timeout_s`` seconds."""

    def __init__(self, timeout_s: float, on_fire: Callable[[str], None]):
        self.timeout_s = timeout_s
        self._on_fire = on_fire
        self._last = time.monotonic()
        self._phase = "start"
        self._thread = threading.Thread(target=self._run, name="mtc-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def beat(self, phase: str | None = None) -> None:
        self._last = time.monotonic()
        if phase is not None:
            self._phase = phase

    def _run(self) -> None:
        while True:
            time.sleep(0.5)
            idle = time.monotonic() - self._last
            if idle > self.timeout_s:
                msg = f"watchdog: no progress for {idle:.1f}s in phase {self._phase!r}; exiting {EXIT_RETRYABLE}"
                try:
                    self._on_fire(msg)
                finally:
                    os._exit(EXIT_RETRYABLE)

class Workload:
    def __init__(self, cfg: Config, ident: Identity, events_file: str):
        self.cfg = cfg
        self.ident = ident
        self.events_file = events_file
        self.watchdog: Watchdog | None = None
        self.current_step: int | None = None  # last completed (or restored) step

    # -- events / logging ------------------------------------------------------------------
    def emit(self, event: str, **fields: Any) -> None:
        fields.setdefault("step", None)
        try:
            append_event(self.events_file, event=event, process=self.ident.process_id, **fields)
        except OSError as e:  # never let event logging kill training
            print(f"warning: cannot write event {event}: {e}", file=sys.stderr, flush=True)

    def log(self, msg: str) -> None:
        print(f"[process {self.ident.process_id}] {msg}", flush=True)

    def beat(self, phase: str | None = None) -> None:
        if self.watchdog is not None:
            self.watchdog.beat(phase)

    # -- setup -------------------------------------------------------------------------------
    def setup_jax(self) -> None:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax
        from absl import flags
        from absl import logging as absl_logging

        if not flags.FLAGS.is_parsed():
            flags.FLAGS(sys.argv[:1])
        absl_logging.set_verbosity(absl_logging.WARNING)
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", self.cfg.jax_num_cpu_devices)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        t = self.cfg.distributed_timeout_s
        self.beat("jax.distributed.initialize")
        jax.distributed.initialize(
            coordinator_address=self.ident.coordinator_address,
            coordinator_bind_address=self.ident.coordinator_bind_address,  # loopback only on the local target
            num_processes=self.ident.num_processes,
            process_id=self.ident.process_id,
            cluster_detection_method="deactivate",
            initialization_timeout=t,
            # The watchdog (t) fires before the heartbeat machinery (t + 30), so a survivor of a dead
            # peer exits with the retryable code 42 rather than whatever the runtime chooses.
            heartbeat_timeout_seconds=t + 30,
            shutdown_timeout_seconds=t,
        )
        import orbax.checkpoint as ocp

        ocp.multihost.initialize_runtime_to_distributed_ids()
        ocp.multihost.initialize_distributed_to_device_ids()
        self.beat("jax initialized")

    def build(self) -> None:
        """The mesh (one row per slice), the replicated train state and the jitted training step."""
        import jax
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        cfg, ident = self.cfg, self.ident
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        n_dev = len(devices)
        if cfg.global_batch_size % n_dev:
            raise FlagError(
                f"flag global_batch_size: bad value {cfg.global_batch_size}; allowed: a multiple of the"
                f" device count {n_dev}"
            )
        # Replica axis first: one row per slice, rows follow process boundaries.
        mesh_devices = np.array(devices, dtype=object).reshape(ident.num_slices, n_dev // ident.num_slices)
        self.mesh = Mesh(mesh_devices, ("replica", "data"))
        self.replicated = NamedSharding(self.mesh, P())
        self.batch_sharding = NamedSharding(self.mesh, P(("replica", "data"), None))

        host_params = model.init_params(cfg.seed, cfg.model_dim)

        def put(x: np.ndarray) -> jax.Array:
            return jax.make_array_from_callback(x.shape, self.replicated, lambda idx: x[idx])

        params = {k: put(v) for k, v in host_params.items()}
        zeros = {k: put(np.zeros_like(v)) for k, v in host_params.items()}
        self.state = {
            "params": params,
            "mu": zeros,
            "nu": {k: put(np.zeros_like(v)) for k, v in host_params.items()},
            "step": put(np.zeros((), np.int32)),
        }
        self.teacher = put(model.teacher(cfg.seed, cfg.model_dim))
        self.n_params = sum(v.size for v in host_params.values())

        state_shardings = jax.tree.map(lambda _: self.replicated, self.state)
        self.train_step = jax.jit(model.adam_train_step(cfg.learning_rate),
                                  out_shardings=(state_shardings, self.replicated))

    def batch(self, step: int):
        """Deterministic global batch for update ``step`` (1-based), from (seed, step) only."""
        import jax

        cfg = self.cfg
        x = model.batch_inputs(cfg.seed, step, cfg.global_batch_size, cfg.model_dim)
        return jax.make_array_from_callback(x.shape, self.batch_sharding, lambda idx: x[idx])

    def abstract_state(self):
        import jax

        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), self.state)

    # -- main loop ---------------------------------------------------------------------------
    def params_sha256(self) -> str:
        import numpy as np

        h = hashlib.sha256()
        params = self.state["params"]
        for name in sorted(params):
            arr = np.asarray(params[name].addressable_data(0))
            h.update(name.encode())
            h.update(str(arr.dtype).encode() + str(arr.shape).encode())
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()

    def shutdown_distributed(self) -> None:
        import jax

        self.beat("shutdown")
        try:
            jax.distributed.shutdown()
        except Exception as e:  # noqa: BLE001 - exit anyway; the work is saved
            print(f"warning: jax.distributed.shutdown failed: {e}", file=sys.stderr, flush=True)

    def restore(self) -> int:
        """Restore the newest step of either tier into ``self.state``; return the start step."""
        step, state = self.ckpt.restore()
        if state is not None:
            self.state = state
        return step

    def run(self) -> int:
        cfg = self.cfg
        t_start = time.time()
        self.setup_jax()
        t_init = time.time()
        self.build()
        self.ckpt = ckpt = Checkpointer(cfg, self.ident, self.emit, self.log, self.beat)
        ckpt.open(self.mesh, self.abstract_state())
        self.log(
            f"{self.ident.num_processes} processes ({self.ident.num_slices} slices x"
            f" {self.ident.hosts_per_slice} hosts), mesh {dict(self.mesh.shape)}, {self.n_params} params,"
            f" checkpointing mode {ckpt.mode}, setup {time.time() - t_start:.2f}s"
            f" (import+jax.distributed {t_init - t_start:.2f}s, model+manager {time.time() - t_init:.2f}s)"
        )
        step = self.restore()
        self.current_step = step
        while step < cfg.steps:
            t0 = time.time()
            new_state, loss = self.train_step(self.state, self.batch(step + 1), self.teacher)
            loss = float(loss.addressable_data(0))
            self.state = new_state
            step += 1
            self.current_step = step
            if cfg.step_time_ms:
                time.sleep(cfg.step_time_ms / 1000.0)
            seconds = time.time() - t0
            print(f"completed step: {step}, seconds: {seconds:.3f}, loss: {loss:.6f}", flush=True)
            self.emit("step", step=step, seconds=round(seconds, 4), loss=loss)
            self.beat(f"step {step}")
            if step == cfg.steps:
                break
            if ckpt.reached_preemption(step):
                saved = False
                if cfg.enable_autocheckpoint and ckpt.enabled:
                    ckpt.save(step, self.state, force=True)
                    saved = True
                ckpt.close()
                self.log(f"preempted at step {step}; checkpoint saved: {saved}")
                self.emit("preempted", step=step, saved=saved)
                self.shutdown_distributed()
                return EXIT_OK
            # Our own rule, not ``mgr.should_save``: the emergency manager's should_save runs a
            # cross-process all-reduce on every step; this rule needs none (see ``schedule.save_due``).
            if ckpt.save_due(step):
                ckpt.save(step, self.state)
        # Final step: make sure it is saved and finalized persistently.
        if ckpt.enabled:
            ckpt.ensure_final_saved(step, self.state)
            ckpt.close()
        sha = self.params_sha256()
        self.log(f"finished step {step} params_sha256={sha} total {time.time() - t_start:.2f}s")
        self.emit("finish", step=step, params_sha256=sha)
        self.shutdown_distributed()
        return EXIT_OK
