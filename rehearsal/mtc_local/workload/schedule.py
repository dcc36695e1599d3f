"""When to save: a pure function of the flags and the step, the same answer in every process."""

from __future__ import annotations

from mtc_local.workload.flags import Config


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

