"""The workload's command line: MaxText-style ``key=value`` flags, their defaults, and the exit codes.

Exit codes: 0 finished or preempted (SIGTERM, like MaxText: compare the last finalized persistent
step with ``steps`` to know which), 2 bad flags / configuration (do not retry), 42 retryable
failure (peer died, distributed timeout, watchdog, unexpected error).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from mtc_provider.core.definition.render.flag_table import DEFAULT_STEPS, WORKLOAD_FLAGS

EXIT_OK = 0
EXIT_BAD_CONFIG = 2
EXIT_RETRYABLE = 42



class FlagError(ValueError):
    """A flag is unknown or has a bad value (exit code 2)."""


class RetryableError(RuntimeError):
    """A transient failure (exit code 42)."""


_BOOL_TRUE = {"True", "true", "1"}
_BOOL_FALSE = {"False", "false", "0"}

# name -> (type, default). ``None`` default means required. The one table lives in the core (the provider
# renders the flags from it): mtc_provider.core.definition.render.flag_table.
FLAG_SPECS: dict[str, tuple[type, Any]] = WORKLOAD_FLAGS


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
    enable_multi_tier_checkpointing: bool = False
    multi_tier_checkpointing_backup_interval_minutes: int = 0
    multi_tier_checkpointing_backup_interval_steps: int = 0
    use_replicator_service: bool = False

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
    if cfg.enable_multi_tier_checkpointing and cfg.enable_emergency_checkpoint:
        raise FlagError("flag enable_multi_tier_checkpointing: bad value True with enable_emergency_checkpoint=True;"
                        " allowed: one local-checkpoint mode at a time")
    mode = "enable_multi_tier_checkpointing" if cfg.enable_multi_tier_checkpointing else "enable_emergency_checkpoint"
    if cfg.enable_checkpointing and (cfg.enable_emergency_checkpoint or cfg.enable_multi_tier_checkpointing):
        if not cfg.local_checkpoint_directory:
            raise FlagError(
                f"flag local_checkpoint_directory: required (a ramdisk path) when {mode}=True"
            )
        if cfg.local_checkpoint_period <= 0:
            raise FlagError(
                f"flag local_checkpoint_period: bad value {cfg.local_checkpoint_period!r};"
                f" allowed: an integer > 0 when {mode}=True"
            )
