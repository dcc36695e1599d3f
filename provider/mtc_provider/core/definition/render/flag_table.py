"""The one flag table: MaxText's checkpointing flags with the guide's defaults, and the local workload's own flags.

Both sides of the process boundary read it: `CheckpointingSpec` (core.definition.description.spec) takes its defaults from
`CHECKPOINT_FLAGS`, the provider renders `key=value` arguments from the spec, and the local workload
(`mtc_local.workload.flags`) parses them with `WORKLOAD_FLAGS` (tests/rehearsal/workload/test_workload_contract.py
pins the rendered arguments against the workload's parser in its own process). name -> (type, default);
a `None` default means required.
"""

from __future__ import annotations

from typing import Any

# MaxText's eight checkpointing flags, defaults as in MaxText's emergency checkpointing guide.
CHECKPOINT_FLAGS: dict[str, tuple[type, Any]] = {
    "enable_checkpointing": (bool, True),
    "enable_emergency_checkpoint": (bool, False),
    "async_checkpointing": (bool, True),
    "local_checkpoint_directory": (str, ""),
    "local_checkpoint_period": (int, 0),
    "checkpoint_period": (int, 10000),
    "enable_single_replica_ckpt_restoring": (bool, False),
    "enable_autocheckpoint": (bool, False),
}
DEFAULT_STEPS = 100  # the local workload's, when started by hand without steps=
# The local workload's model settings: what `workload.extra_flags` may set on the local target.
LOCAL_MODEL_FLAGS: dict[str, tuple[type, Any]] = {
    "model_dim": (int, 512),
    "global_batch_size": (int, 64),
    "learning_rate": (float, 1e-3),
}
# The local workload's rehearsal settings: the provider always renders them on the local target.
LOCAL_RUN_FLAGS: dict[str, tuple[type, Any]] = {
    "step_time_ms": (int, 0),
    "seed": (int, 0),
    # The workload's own watchdog: a survivor of a dead or frozen peer exits (retryable) after this long.
    "distributed_timeout_s": (int, 60),
}
# MaxText's multi-tier flags, rendered only in that mode (CheckpointingSpec._multi_tier_flags); 0: unset. The
# local target's light workload runs this mode against the runner's replicator (mtc_local.runner.replicator).
MULTI_TIER_FLAGS: dict[str, tuple[type, Any]] = {
    "enable_multi_tier_checkpointing": (bool, False),
    "multi_tier_checkpointing_backup_interval_minutes": (int, 0),
    "multi_tier_checkpointing_backup_interval_steps": (int, 0),
    "use_replicator_service": (bool, False),
}
WORKLOAD_FLAGS: dict[str, tuple[type, Any]] = {
    **CHECKPOINT_FLAGS,
    **MULTI_TIER_FLAGS,
    # Run identity and outputs.
    "run_name": (str, None),
    "base_output_directory": (str, None),
    "steps": (int, DEFAULT_STEPS),
    "events_file": (str, ""),
    # Model / data.
    "seed": LOCAL_RUN_FLAGS["seed"],
    **LOCAL_MODEL_FLAGS,
    "step_time_ms": LOCAL_RUN_FLAGS["step_time_ms"],
    # Runtime.
    "jax_num_cpu_devices": (int, 1),
    "distributed_timeout_s": LOCAL_RUN_FLAGS["distributed_timeout_s"],
    "local_checkpoint_max_to_keep": (int, 2),
}


def default(name: str) -> Any:
    """The table's default of one checkpointing flag (what CheckpointingSpec's field defaults are)."""
    return CHECKPOINT_FLAGS[name][1]
