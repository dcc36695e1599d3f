"""A small MaxText stand-in: a JAX MLP trained across real OS processes with Orbax checkpointing.

Run as ``python -m mtc_provider.local.workload [base.yml] key=value ...`` (MaxText style). Every
process of the job runs the same command; its identity comes from the ramdisk file
``<local_checkpoint_directory>/jax-init-info.txt`` (line 1: process id, line 2: coordinator
``host:port``, as written by the GKE MTC driver) or, failing that, from the environment
(``MTC_PROCESS_ID``, ``MTC_COORDINATOR_ADDRESS``). The job size is
``MTC_NUM_SLICES * MTC_HOSTS_PER_SLICE``; JobSet variables (``JOBSET_NAME``,
``REPLICATED_JOB_NAME``, ``JOB_INDEX``, ``JOB_COMPLETION_INDEX``) are recorded in the start event.

Checkpointing:
  * ``enable_emergency_checkpoint=True``: Orbax's emergency ``CheckpointManager``; local saves every
    ``local_checkpoint_period`` steps into the ramdisk (replicas 1..N-1), persistent saves every
    ``checkpoint_period`` steps into ``<base_output_directory>/<run_name>/checkpoints/`` (replica 0;
    the item is ``<step>/default/``).
  * ``enable_emergency_checkpoint=False``: a plain Orbax ``CheckpointManager`` on the persistent
    directory only (the persistent-only baseline).
  * ``enable_checkpointing=False``: no checkpoints.
  The last step (``steps``) is always saved persistently (``<step>/commit_success.txt``).
  Every process computes the save steps alone from these flags (:func:`save_due`) and calls the
  manager only then; the preemption sync point is checked after every step.

Step numbering: step N is the state after N optimizer updates; a checkpoint named N restores that
state and training continues with update N+1. Each update prints
``completed step: N, seconds: X, loss: Y``.

Exit codes: 0 finished or preempted (SIGTERM, like MaxText: compare the last finalized persistent
step with ``steps`` to know which), 2 bad flags / configuration (do not retry), 42 retryable
failure (peer died, distributed timeout, watchdog, unexpected error).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from mtc_provider.local.workload_events import append_event

EXIT_OK = 0
EXIT_BAD_CONFIG = 2
EXIT_RETRYABLE = 42

INIT_INFO_FILENAME = "jax-init-info.txt"
DEFAULT_STEPS = 100


class FlagError(ValueError):
    """A flag is unknown or has a bad value (exit code 2)."""


class RetryableError(RuntimeError):
    """A transient failure (exit code 42)."""


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------

_BOOL_TRUE = {"True", "true", "1"}
_BOOL_FALSE = {"False", "false", "0"}

# name -> (type, default). ``None`` default means required.
FLAG_SPECS: dict[str, tuple[type, Any]] = {
    # MaxText checkpointing flags, defaults as in MaxText's emergency checkpointing guide.
    "enable_checkpointing": (bool, True),
    "enable_emergency_checkpoint": (bool, False),
    "async_checkpointing": (bool, True),
    "local_checkpoint_directory": (str, ""),
    "local_checkpoint_period": (int, 0),
    "checkpoint_period": (int, 10000),
    "enable_single_replica_ckpt_restoring": (bool, False),
    "enable_autocheckpoint": (bool, False),
    # Run identity and outputs.
    "run_name": (str, None),
    "base_output_directory": (str, None),
    "steps": (int, DEFAULT_STEPS),
    "events_file": (str, ""),
    # Model / data.
    "seed": (int, 0),
    "model_dim": (int, 512),
    "global_batch_size": (int, 64),
    "learning_rate": (float, 1e-3),
    "step_time_ms": (int, 0),
    # Runtime.
    "jax_num_cpu_devices": (int, 1),
    "distributed_timeout_s": (int, 60),
    "local_checkpoint_max_to_keep": (int, 2),
}


@dataclasses.dataclass(frozen=True)
class Config:
    enable_checkpointing: bool
    enable_emergency_checkpoint: bool
    async_checkpointing: bool
    local_checkpoint_directory: str
    local_checkpoint_period: int
    checkpoint_period: int
    enable_single_replica_ckpt_restoring: bool
    enable_autocheckpoint: bool
    run_name: str
    base_output_directory: str
    steps: int
    events_file: str
    seed: int
    model_dim: int
    global_batch_size: int
    learning_rate: float
    step_time_ms: int
    jax_num_cpu_devices: int
    distributed_timeout_s: int
    local_checkpoint_max_to_keep: int

    @property
    def run_directory(self) -> str:
        return _join(self.base_output_directory, self.run_name)

    @property
    def persistent_checkpoint_directory(self) -> str:
        """``<base_output_directory>/<run_name>/checkpoints`` (MaxText's layout)."""
        return _join(self.base_output_directory, self.run_name, "checkpoints")


def _join(base: str, *parts: str) -> str:
    if "://" in base:
        return "/".join([base.rstrip("/"), *parts])
    return os.path.join(base, *parts)


def _convert(key: str, typ: type, raw: str) -> Any:
    if typ is bool:
        if raw in _BOOL_TRUE:
            return True
        if raw in _BOOL_FALSE:
            return False
        raise FlagError(f"flag {key}: bad value {raw!r}; allowed: True, False, true, false, 1, 0")
    if typ is int:
        try:
            return int(raw)
        except ValueError:
            raise FlagError(f"flag {key}: bad value {raw!r}; allowed: an integer") from None
    if typ is float:
        try:
            return float(raw)
        except ValueError:
            raise FlagError(f"flag {key}: bad value {raw!r}; allowed: a number") from None
    return raw


def parse_flags(argv: list[str]) -> Config:
    """Parse MaxText-style ``key=value`` arguments (an optional leading ``*.yml`` is ignored).

    Raises :class:`FlagError` naming the key and the allowed values.
    """
    args = list(argv)
    if args and "=" not in args[0] and args[0].endswith((".yml", ".yaml")):
        args = args[1:]
    values: dict[str, Any] = {}
    for arg in args:
        if "=" not in arg:
            raise FlagError(f"argument {arg!r}: expected key=value; allowed keys: {', '.join(FLAG_SPECS)}")
        key, raw = arg.split("=", 1)
        key = key.strip().lstrip("-")
        if key not in FLAG_SPECS:
            raise FlagError(f"unknown flag {key!r}; allowed keys: {', '.join(FLAG_SPECS)}")
        values[key] = _convert(key, FLAG_SPECS[key][0], raw)
    for key, (_, default) in FLAG_SPECS.items():
        if key not in values:
            if default is None:
                raise FlagError(f"flag {key} is required (pass {key}=...)")
            values[key] = default
    cfg = Config(**values)
    _validate(cfg)
    return cfg


def _validate(cfg: Config) -> None:
    def positive(key: str) -> None:
        if getattr(cfg, key) <= 0:
            raise FlagError(f"flag {key}: bad value {getattr(cfg, key)!r}; allowed: an integer > 0")

    for key in ("steps", "checkpoint_period", "model_dim", "global_batch_size",
                "jax_num_cpu_devices", "distributed_timeout_s", "local_checkpoint_max_to_keep"):
        positive(key)
    for key in ("local_checkpoint_period", "step_time_ms", "seed"):
        if getattr(cfg, key) < 0:
            raise FlagError(f"flag {key}: bad value {getattr(cfg, key)!r}; allowed: an integer >= 0")
    if not cfg.learning_rate > 0:
        raise FlagError(f"flag learning_rate: bad value {cfg.learning_rate!r}; allowed: a number > 0")
    if not cfg.run_name or "/" in cfg.run_name:
        raise FlagError(f"flag run_name: bad value {cfg.run_name!r}; allowed: a non-empty name without '/'")
    if not cfg.base_output_directory:
        raise FlagError("flag base_output_directory: must not be empty; allowed: a local path or gs://...")
    if cfg.enable_checkpointing and cfg.enable_emergency_checkpoint:
        if not cfg.local_checkpoint_directory:
            raise FlagError(
                "flag local_checkpoint_directory: required (a ramdisk path) when"
                " enable_emergency_checkpoint=True"
            )
        if cfg.local_checkpoint_period <= 0:
            raise FlagError(
                f"flag local_checkpoint_period: bad value {cfg.local_checkpoint_period!r};"
                " allowed: an integer > 0 when enable_emergency_checkpoint=True"
            )


# --------------------------------------------------------------------------------------------
# When to save
# --------------------------------------------------------------------------------------------


def persistent_save_due(cfg: Config, step: int) -> bool:
    """Persistent tier: every ``checkpoint_period`` steps and the last step."""
    return step % cfg.checkpoint_period == 0 or step == cfg.steps


def local_save_due(cfg: Config, step: int) -> bool:
    """Local (ramdisk) tier: every ``local_checkpoint_period`` steps (0 = never)."""
    return cfg.local_checkpoint_period > 0 and step % cfg.local_checkpoint_period == 0


def save_due(cfg: Config, step: int, mode: str) -> bool:
    """Whether the processes call the checkpoint manager's ``save`` after update ``step``.

    A pure function of the flags and the step, so every process gets the same answer without
    communicating, as MaxText does: Orbax's emergency ``CheckpointManager.should_save`` answers the
    same question with an all-reduce (``multihost.global_max``, ~20-60 ms on CPU/gloo) on every
    step. ``save`` itself is collective (a barrier, then an all-reduce of what was saved), so all
    processes must call it on the same steps: the union of both tiers' schedules in the
    multi-slice emergency mode, where replica 0 writes persistent and the others local copies.
    Preemption saves are separate (``reached_preemption``, checked every step).
    ``mode``: ``none`` | ``persistent`` | ``emergency-single-slice`` | ``emergency``.
    """
    if mode == "none":
        return False
    if mode == "emergency":
        return local_save_due(cfg, step) or persistent_save_due(cfg, step)
    return persistent_save_due(cfg, step)


# --------------------------------------------------------------------------------------------
# Process identity
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Identity:
    process_id: int
    num_processes: int
    coordinator_address: str
    num_slices: int
    hosts_per_slice: int
    source: str  # "init-info-file" | "env" | "single-process"

    @property
    def slice_index(self) -> int:
        """The slice (replica) this process belongs to in the mesh."""
        return self.process_id // self.hosts_per_slice


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FlagError(f"environment variable {name}: bad value {raw!r}; allowed: an integer") from None
    return value


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_init_info(path: str | os.PathLike) -> tuple[int, str] | None:
    """Parse ``jax-init-info.txt`` (line 1 process id, line 2 coordinator address)."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip()]
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(lines) < 2:
        return None
    try:
        return int(lines[0]), lines[1]
    except ValueError:
        return None


def resolve_identity(cfg: Config, wait_s: float = 10.0) -> Identity:
    num_slices = _env_int("MTC_NUM_SLICES", 1)
    hosts = _env_int("MTC_HOSTS_PER_SLICE", 1)
    if num_slices < 1 or hosts < 1:
        raise FlagError("MTC_NUM_SLICES and MTC_HOSTS_PER_SLICE must be >= 1")
    total = num_slices * hosts

    info = None
    source = ""
    info_path = Path(cfg.local_checkpoint_directory) / INIT_INFO_FILENAME if cfg.local_checkpoint_directory else None
    if info_path is not None:
        info = read_init_info(info_path)
        source = "init-info-file"
    if info is None and os.environ.get("MTC_PROCESS_ID", "") != "":
        pid = _env_int("MTC_PROCESS_ID", 0)
        coord = os.environ.get("MTC_COORDINATOR_ADDRESS", "")
        if not coord:
            if total != 1:
                raise FlagError("MTC_PROCESS_ID is set but MTC_COORDINATOR_ADDRESS is not")
            coord = f"127.0.0.1:{_free_port()}"
        info, source = (pid, coord), "env"
    if info is None and info_path is not None and cfg.enable_emergency_checkpoint and total > 1:
        # The MTC driver writes the file into the ramdisk; give it a moment, then call it transient.
        deadline = time.monotonic() + wait_s
        while info is None and time.monotonic() < deadline:
            time.sleep(0.2)
            info = read_init_info(info_path)
        if info is None:
            raise RetryableError(f"{info_path} did not appear within {wait_s:.0f}s")
        source = "init-info-file"
    if info is None:
        if total != 1:
            raise FlagError(
                f"cannot determine the process id: no {INIT_INFO_FILENAME} in local_checkpoint_directory"
                " and no MTC_PROCESS_ID/MTC_COORDINATOR_ADDRESS in the environment"
            )
        info, source = (0, f"127.0.0.1:{_free_port()}"), "single-process"
    pid, coord = info
    if not 0 <= pid < total:
        raise FlagError(f"process id {pid} out of range for {num_slices} slices x {hosts} hosts")
    return Identity(pid, total, coord, num_slices, hosts, source)


# --------------------------------------------------------------------------------------------
# Watchdog and save tracking
# --------------------------------------------------------------------------------------------


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


class SaveTracker:
    """Emits ``save_end`` when a step directory this process writes to is finalized."""

    def __init__(self, emit: Callable[..., None]):
        self._emit = emit
        self._pending: list[tuple[str, int, Path, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mtc-save-tracker", daemon=True)
        self._thread.start()

    def add(self, tier: str, step: int, directory: str, t0: float) -> None:
        if "://" in directory:
            return  # not pollable cheaply; the finish/wait path covers it
        with self._lock:
            self._pending.append((tier, step, Path(directory), t0))

    def _poll(self) -> None:
        with self._lock:
            remaining = []
            for tier, step, directory, t0 in self._pending:
                if (directory / str(step) / "commit_success.txt").exists():
                    self._emit("save_end", step=step, tier=tier, duration_s=round(time.time() - t0, 4))
                else:
                    remaining.append((tier, step, directory, t0))
            self._pending = remaining

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._poll()

    def flush(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self._poll()
            with self._lock:
                if not self._pending or time.monotonic() > deadline:
                    return
            time.sleep(0.02)


# --------------------------------------------------------------------------------------------
# The program
# --------------------------------------------------------------------------------------------


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
        import jax
        import jax.numpy as jnp
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

        d, h = cfg.model_dim, 4 * cfg.model_dim
        rng = np.random.default_rng([cfg.seed, 1])
        host_params = {
            "w1": (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32),
            "b1": np.zeros((h,), np.float32),
            "w2": (rng.standard_normal((h, d)) / np.sqrt(h)).astype(np.float32),
            "b2": np.zeros((d,), np.float32),
            "w3": (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32),
        }
        teacher = (np.random.default_rng([cfg.seed, 2]).standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)

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
        self.teacher = put(teacher)
        self.n_params = sum(v.size for v in host_params.values())

        lr, b1, b2, eps = cfg.learning_rate, 0.9, 0.999, 1e-8

        def loss_fn(p, x, t):
            y = jnp.tanh(x @ t)
            z = jax.nn.gelu(x @ p["w1"] + p["b1"])
            z = jax.nn.gelu(z @ p["w2"] + p["b2"])
            out = z @ p["w3"]
            return jnp.mean((out - y) ** 2)

        def train_step(state, x, t):
            loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, t)
            step = state["step"] + 1
            tf = step.astype(jnp.float32)
            mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["mu"], grads)
            nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["nu"], grads)
            c1, c2 = 1 - b1**tf, 1 - b2**tf
            params = jax.tree.map(
                lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), state["params"], mu, nu
            )
            return {"params": params, "mu": mu, "nu": nu, "step": step}, loss

        state_shardings = jax.tree.map(lambda _: self.replicated, self.state)
        self.train_step = jax.jit(train_step, out_shardings=(state_shardings, self.replicated))

    def batch(self, step: int):
        """Deterministic global batch for update ``step`` (1-based), from (seed, step) only."""
        import jax
        import numpy as np

        cfg = self.cfg
        x = np.random.default_rng([cfg.seed, 3, step]).standard_normal(
            (cfg.global_batch_size, cfg.model_dim)
        ).astype(np.float32)
        return jax.make_array_from_callback(x.shape, self.batch_sharding, lambda idx: x[idx])

    def abstract_state(self):
        import jax

        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), self.state)

    # -- checkpointing -----------------------------------------------------------------------
    def persistent_should_save(self, step: int) -> bool:
        return persistent_save_due(self.cfg, step)

    def local_should_save(self, step: int) -> bool:
        return local_save_due(self.cfg, step)

    def save_due(self, step: int) -> bool:
        """Whether any tier has a regular save at ``step`` (see :func:`save_due`)."""
        return save_due(self.cfg, step, self.mode)

    def make_manager(self) -> None:
        import orbax.checkpoint as ocp

        cfg = self.cfg
        self.mgr = None
        self.mode = "none"
        if not cfg.enable_checkpointing:
            return
        persistent_dir = cfg.persistent_checkpoint_directory
        if "://" not in persistent_dir:
            Path(persistent_dir).mkdir(parents=True, exist_ok=True)
        self.persistent_dir = persistent_dir
        self._bucket_cost_setup()
        if cfg.enable_emergency_checkpoint:
            from orbax.checkpoint.experimental.emergency import checkpoint_manager as ecm

            Path(cfg.local_checkpoint_directory).mkdir(parents=True, exist_ok=True)
            options = ecm.CheckpointManagerOptions(
                local=ecm.LocalCheckpointOptions(
                    save_interval_steps=cfg.local_checkpoint_period,
                    max_to_keep=cfg.local_checkpoint_max_to_keep,
                    should_save_fn=lambda step, _latest: self.local_should_save(step),
                ),
                persistent=ecm.PersistentCheckpointOptions(
                    save_interval_steps=cfg.checkpoint_period,
                    should_save_fn=lambda step, _latest: self.persistent_should_save(step),
                ),
                replica_axis_index=0,
                enable_async_checkpointing=cfg.async_checkpointing,
                multiprocessing_options=ecm.MultiprocessingOptions(
                    coordination_timeout_secs=cfg.distributed_timeout_s
                ),
            )
            self.mgr = ecm.CheckpointManager(
                cfg.local_checkpoint_directory,
                persistent_dir,
                global_mesh=self.mesh,
                abstract_state=self.abstract_state(),
                options=options,
            )
            self.mode = "emergency" if self.ident.num_slices >= 2 else "emergency-single-slice"
            self.in_primary_slice = bool(self.mgr.in_primary_slice)
        else:
            options = ocp.CheckpointManagerOptions(
                should_save_fn=lambda step, _latest: self.persistent_should_save(step),
                enable_async_checkpointing=cfg.async_checkpointing,
                create=True,
                atomicity_options=ocp.options.AtomicityOptions(),
            )
            self.mgr = ocp.CheckpointManager(persistent_dir, options=options)
            self.mode = "persistent"
            self.in_primary_slice = True

    def _tiers_written(self, step: int, forced: bool) -> list[tuple[str, str]]:
        """(tier, directory) pairs this process writes for a save at ``step``."""
        if self.mode == "emergency":
            if self.in_primary_slice:
                if forced or self.persistent_should_save(step):
                    return [("persistent", self.persistent_dir)]
                return []
            if forced or self.local_should_save(step):
                return [("local", self.cfg.local_checkpoint_directory)]
            return []
        if forced or self.persistent_should_save(step):
            return [("persistent", self.persistent_dir)]
        return []

    def save(self, step: int, force: bool = False) -> bool:
        import orbax.checkpoint as ocp

        tiers = self._tiers_written(step, force)
        t0 = time.time()
        for tier, _ in tiers:
            self.emit("save_start", step=step, tier=tier)
        if self.mode == "persistent":
            saved = self.mgr.save(step, args=ocp.args.StandardSave(self.state), force=force)
        else:
            saved = self.mgr.save(step, args=ocp.args.Composite(state=ocp.args.PyTreeSave(self.state)), force=force)
        blocking = time.time() - t0
        if any(tier == "persistent" for tier, _ in tiers):
            self._bucket_upload(step)
        for tier, directory in tiers:
            self.tracker.add(tier, step, directory, t0)
        self.log(f"saved step {step} (tiers: {','.join(t for t, _ in tiers) or '-'}; blocking {blocking:.3f}s)")
        return bool(saved)

    def persistent_finalized(self, step: int) -> bool:
        from etils import epath

        return (epath.Path(self.persistent_dir) / str(step) / "commit_success.txt").exists()

    def restore(self) -> int:
        """Restore the newest step of either tier into ``self.state``; return the start step."""
        import orbax.checkpoint as ocp

        if self.mgr is None:
            self.log("checkpointing disabled; starting from step 0")
            return 0
        self.beat("restore")
        latest = self.mgr.latest_step()
        if latest is not None:
            latest = int(latest)
        if latest is None:
            self.log("no checkpoint found; starting from step 0")
            return 0
        tier = "persistent"
        t0 = time.time()
        if self.mode.startswith("emergency"):
            inner = getattr(self.mgr, "_checkpoint_manager", None)
            finder = getattr(inner, "_find_slice_with_complete_local_checkpoint", None)
            if finder is not None and finder(latest) > -1:  # the same test Orbax's restore() makes
                tier = "local"
            t0 = time.time()
            bucket = self._bucket_restore(latest) if tier == "persistent" else None
            restored = self.mgr.restore(latest)
            state = restored.state
        else:
            bucket = self._bucket_restore(latest)
            state = self.mgr.restore(latest, args=ocp.args.StandardRestore(self.abstract_state()))
        import jax

        jax.block_until_ready(state)
        duration = time.time() - t0
        restored_step = int(state["step"].addressable_data(0))
        if restored_step != latest:
            raise RetryableError(f"checkpoint {latest} holds step counter {restored_step}")
        self.state = state
        self.log(f"restored step {latest} from tier {tier} in {duration:.3f}s")
        self.emit("restore", step=latest, tier=tier, duration_s=round(duration, 4), **(bucket or {}))
        self.beat("restored")
        return latest

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

    def reached_preemption(self, step: int) -> bool:
        """Called on every step, as JAX requires: the preemption sync point is max(step of each
        process when the notice arrived) + 1, agreed in the background, so a process that skipped
        that step would never see it. The call itself only reads that agreed step (~1 us here)."""
        if self.mgr is not None:
            return bool(self.mgr.reached_preemption(step))
        from jax.experimental import multihost_utils

        try:
            return bool(multihost_utils.reached_preemption_sync_point(step))
        except RuntimeError:
            return False

    # -- the persistent tier's cost model (local/bucket_cost.py; off unless its env vars are set) --------
    def _bucket_cost_setup(self) -> None:
        from mtc_provider.local import bucket_cost

        self.bucket_cost = bucket_cost.from_env() if "://" not in self.persistent_dir else None
        self.bucket_upload = bucket_cost.UploadCost(self.bucket_cost, self.ident.hosts_per_slice)

    def _bucket_restore(self, step: int) -> dict[str, float] | None:
        from mtc_provider.local import bucket_cost

        return bucket_cost.pay_restore(self.bucket_cost, Path(self.persistent_dir) / str(step),
                                       self.ident.hosts_per_slice)

    def _bucket_upload(self, step: int) -> None:
        import jax

        leaves = jax.tree_util.tree_leaves(self.state)
        self.bucket_upload.start(Path(self.persistent_dir) / str(step), sum(int(x.nbytes) for x in leaves),
                                 len(leaves) + 4)  # + Orbax's metadata objects
        if not self.cfg.async_checkpointing:
            self.bucket_upload.join()

    def close(self) -> None:
        if self.mgr is not None:
            self.beat("wait for saves")
            self.bucket_upload.join()
            self.mgr.wait_until_finished()
            self.mgr.close()
            self.tracker.flush()

    def shutdown_distributed(self) -> None:
        import jax

        self.beat("shutdown")
        try:
            jax.distributed.shutdown()
        except Exception as e:  # noqa: BLE001 - exit anyway; the work is saved
            print(f"warning: jax.distributed.shutdown failed: {e}", file=sys.stderr, flush=True)

    def run(self) -> int:
        cfg = self.cfg
        t_start = time.time()
        self.setup_jax()
        t_init = time.time()
        self.build()
        self.tracker = SaveTracker(self.emit)
        self.make_manager()
        self.log(
            f"{self.ident.num_processes} processes ({self.ident.num_slices} slices x"
            f" {self.ident.hosts_per_slice} hosts), mesh {dict(self.mesh.shape)}, {self.n_params} params,"
            f" checkpointing mode {self.mode}, setup {time.time() - t_start:.2f}s"
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
            if self.reached_preemption(step):
                saved = False
                if cfg.enable_autocheckpoint and self.mgr is not None:
                    self.save(step, force=True)
                    saved = True
                self.close()
                self.log(f"preempted at step {step}; checkpoint saved: {saved}")
                self.emit("preempted", step=step, saved=saved)
                self.shutdown_distributed()
                return EXIT_OK
            # Our own rule, not ``mgr.should_save``: the emergency manager's should_save runs a
            # cross-process all-reduce on every step; this rule needs none (see ``save_due``).
            if self.save_due(step):
                self.save(step)
        # Final step: make sure it is saved and finalized persistently.
        if self.mgr is not None:
            self.ensure_final_saved(step)
            self.close()
        sha = self.params_sha256()
        self.log(f"finished step {step} params_sha256={sha} total {time.time() - t_start:.2f}s")
        self.emit("finish", step=step, params_sha256=sha)
        self.shutdown_distributed()
        return EXIT_OK

    def ensure_final_saved(self, step: int) -> None:
        import numpy as np
        import orbax.checkpoint as ocp
        from jax.experimental import multihost_utils

        self.beat("final save")
        self.mgr.wait_until_finished()
        multihost_utils.sync_global_devices("mtc-final-check")
        # One process decides, everybody follows: a shared listing read at different moments must
        # never split the processes into "save" and "don't save".
        done = int(self.persistent_finalized(step)) if self.ident.process_id == 0 else 0
        done = int(np.asarray(multihost_utils.broadcast_one_to_all(np.int32(done))))
        if done:
            return
        if self.mode == "emergency":
            inner = self.mgr._checkpoint_manager  # noqa: SLF001
            local_has_it = step in set(self.mgr.all_steps())
            if local_has_it:
                # Restored the final step from the local tier; save it to the persistent tier only.
                if inner.in_primary_slice:
                    pm = inner._persistent_checkpoint_manager  # noqa: SLF001
                    t0 = time.time()
                    self.emit("save_start", step=step, tier="persistent")
                    pm.save(step, args=ocp.args.PyTreeSave(self.state), force=True)
                    pm.wait_until_finished()
                    self.tracker.add("persistent", step, self.persistent_dir, t0)
                multihost_utils.sync_global_devices("mtc-final-persistent")
                return
        self.save(step, force=True)
        self.mgr.wait_until_finished()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = parse_flags(argv)
        ident = resolve_identity(cfg)
    except FlagError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return EXIT_BAD_CONFIG
    except RetryableError as e:
        print(f"error (retryable): {e}", file=sys.stderr, flush=True)
        return EXIT_RETRYABLE

    events_file = cfg.events_file
    if not events_file:
        base = cfg.base_output_directory if "://" not in cfg.base_output_directory else "/tmp/mtc-workload"
        events_file = os.path.join(base, cfg.run_name, "events", f"process-{ident.process_id}.jsonl")
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
        jobset=os.environ.get("JOBSET_NAME"),
        replicated_job=os.environ.get("REPLICATED_JOB_NAME"),
        job_index=os.environ.get("JOB_INDEX"),
        job_completion_index=os.environ.get("JOB_COMPLETION_INDEX"),
        restart_attempt=os.environ.get("JOBSET_RESTART_ATTEMPT"),
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


if __name__ == "__main__":
    sys.exit(main())
