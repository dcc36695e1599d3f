"""Checkpointing with Orbax: the emergency (multi-tier) manager or a plain persistent one, per the flags.

  * ``enable_emergency_checkpoint=True``: Orbax's emergency ``CheckpointManager``; local saves every
    ``local_checkpoint_period`` steps into the ramdisk (replicas 1..N-1), persistent saves every
    ``checkpoint_period`` steps into ``<base_output_directory>/<run_name>/checkpoints/`` (replica 0;
    the item is ``<step>/default/``).
  * ``enable_emergency_checkpoint=False``: a plain Orbax ``CheckpointManager`` on the persistent
    directory only (the persistent-only baseline).
  * ``enable_checkpointing=False``: no checkpoints.
  The last step (``steps``) is always saved persistently (``<step>/commit_success.txt``).
  Every process computes the save steps alone from these flags (``schedule.save_due``) and calls the
  manager only then; the preemption sync point is checked after every step.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

from mtc_local.workload.flags import Config, RetryableError
from mtc_local.workload.identity import Identity
from mtc_local.workload.schedule import local_save_due, persistent_save_due, save_due


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


class _RestoreStats:
    """The emergency manager's structured logger (its `logger` argument): keeps Orbax's own restore statistics, so a
    restore event splits into the read (`checkpointer_duration_secs`: this slice's read of its ramdisk or of the
    bucket; 0 on a slice that only receives) and the cross-slice broadcast (`broadcast_duration_secs`); every entry
    is still logged as Orbax's StandardLogger does."""

    def __init__(self) -> None:
        from orbax.checkpoint._src.logging import standard_logger

        self.standard = standard_logger.StandardLogger()
        self.last: dict[str, Any] = {}

    def log_entry(self, entry: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(entry, dict) and "broadcast_duration_secs" in entry:
            self.last = dict(entry)
        self.standard.log_entry(entry, *args, **kwargs)

    def split(self) -> dict[str, float]:
        read, broadcast = self.last.get("checkpointer_duration_secs"), self.last.get("broadcast_duration_secs")
        return {key: round(float(value), 4) for key, value in (("read_s", read), ("broadcast_s", broadcast))
                if value is not None}


class Checkpointer:
    """The process's checkpoint manager, its save and restore calls, and their events."""

    def __init__(self, cfg: Config, ident: Identity, emit: Callable[..., None], log: Callable[[str], None],
                 beat: Callable[[str], None]):
        self.cfg = cfg
        self.ident = ident
        self.emit = emit
        self.log = log
        self.beat = beat
        self.tracker = SaveTracker(emit)
        self.mgr: Any = None
        self.mode = "none"
        self.in_primary_slice = True

    @property
    def enabled(self) -> bool:
        return self.mgr is not None

    def persistent_should_save(self, step: int) -> bool:
        return persistent_save_due(self.cfg, step)

    def local_should_save(self, step: int) -> bool:
        return local_save_due(self.cfg, step)

    def save_due(self, step: int) -> bool:
        """Whether any tier has a regular save at ``step`` (see :func:`schedule.save_due`)."""
        return save_due(self.cfg, step, self.mode)

    def open(self, mesh: Any, abstract_state: Any) -> None:
        """Make the manager the flags ask for; ``abstract_state`` is the train state's shapes and shardings."""
        import orbax.checkpoint as ocp

        cfg = self.cfg
        self.abstract_state = abstract_state
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
            self.restore_stats = _RestoreStats()
            self.mgr = ecm.CheckpointManager(
                cfg.local_checkpoint_directory,
                persistent_dir,
                global_mesh=mesh,
                abstract_state=abstract_state,
                options=options,
                logger=self.restore_stats,
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

    def save(self, step: int, state: Any, force: bool = False) -> bool:
        import orbax.checkpoint as ocp

        tiers = self._tiers_written(step, force)
        t0 = time.time()
        for tier, _ in tiers:
            self.emit("save_start", step=step, tier=tier)
        if self.mode == "persistent":
            saved = self.mgr.save(step, args=ocp.args.StandardSave(state), force=force)
        else:
            saved = self.mgr.save(step, args=ocp.args.Composite(state=ocp.args.PyTreeSave(state)), force=force)
        blocking = time.time() - t0
        for tier, _ in tiers:  # the time training waited for this save: goodput's checkpoint_save badput
            self.emit("save_blocking", step=step, tier=tier, blocking_s=round(blocking, 6))
        if any(tier == "persistent" for tier, _ in tiers):
            self._bucket_upload(step, state)
        for tier, directory in tiers:
            self.tracker.add(tier, step, directory, t0)
        self.log(f"saved step {step} (tiers: {','.join(t for t, _ in tiers) or '-'}; blocking {blocking:.3f}s)")
        return bool(saved)

    def persistent_finalized(self, step: int) -> bool:
        from etils import epath

        return (epath.Path(self.persistent_dir) / str(step) / "commit_success.txt").exists()

    def restore(self) -> tuple[int, Any]:
        """The newest step of either tier and its train state (``None`` when starting from step 0)."""
        import orbax.checkpoint as ocp

        if self.mgr is None:
            self.log("checkpointing disabled; starting from step 0")
            return 0, None
        self.beat("restore")
        latest = self.mgr.latest_step()
        if latest is not None:
            latest = int(latest)
        if latest is None:
            self.log("no checkpoint found; starting from step 0")
            return 0, None
        # MaxText's line before it restores (`load_state_if_possible`), the one the provider reads from a real run.
        self.log(f"restoring from this run's directory step {latest}")
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
            state = self.mgr.restore(latest, args=ocp.args.StandardRestore(self.abstract_state))
        import jax

        jax.block_until_ready(state)
        duration = time.time() - t0
        restored_step = int(state["step"].addressable_data(0))
        if restored_step != latest:
            raise RetryableError(f"checkpoint {latest} holds step counter {restored_step}")
        self.log(f"restored step {latest} from tier {tier} in {duration:.3f}s")
        split = self.restore_stats.split() if self.mode.startswith("emergency") else {}
        self.emit("restore", step=latest, tier=tier, duration_s=round(duration, 4), **(bucket or {}), **split)
        self.beat("restored")
        return latest, state

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
        from mtc_local import bucket_cost

        self.bucket_cost = bucket_cost.from_env() if "://" not in self.persistent_dir else None
        self.bucket_upload = bucket_cost.UploadCost(self.bucket_cost, self.ident.hosts_per_slice)

    def _bucket_restore(self, step: int) -> dict[str, float] | None:
        from mtc_local import bucket_cost

        return bucket_cost.pay_restore(self.bucket_cost, Path(self.persistent_dir) / str(step),
                                       self.ident.hosts_per_slice)

    def _bucket_upload(self, step: int, state: Any) -> None:
        import jax

        leaves = jax.tree_util.tree_leaves(state)
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

    def ensure_final_saved(self, step: int, state: Any) -> None:
        """Make sure the last step is saved and finalized persistently."""
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
                    pm.save(step, args=ocp.args.PyTreeSave(state), force=True)
                    pm.wait_until_finished()
                    self.emit("save_blocking", step=step, tier="persistent", blocking_s=round(time.time() - t0, 6))
                    self.tracker.add("persistent", step, self.persistent_dir, t0)
                multihost_utils.sync_global_devices("mtc-final-persistent")
                return
        self.save(step, state, force=True)
        self.mgr.wait_until_finished()
