"""A small MaxText stand-in: a JAX MLP trained across real OS processes with Orbax checkpointing.

Run as ``python -m mtc_local.workload [base.yml] key=value ...`` (MaxText style). The package,
along its seams:

- ``flags``: the ``key=value`` flags, their defaults and validation, the exit codes;
- ``identity``: the process id and coordinator, from ``jax-init-info.txt`` in the ramdisk or the environment;
- ``schedule``: which steps are saved, per tier (pure);
- ``model``: the MLP, its seeded data and the Adam step (shared with ``mtc_local/evaluate.py``);
- ``checkpointing``: Orbax's emergency or plain checkpoint manager, saves, restores, the final save;
- ``training``: JAX distributed set-up, the sharded state and the step loop; ``program``: the process's ``main``.

Importing the package loads no JAX (light workloads and tests use its flags and identity).
"""

from mtc_local.workload.flags import (
    DEFAULT_STEPS,
    EXIT_BAD_CONFIG,
    EXIT_OK,
    EXIT_RETRYABLE,
    FLAG_SPECS,
    Config,
    FlagError,
    RetryableError,
    parse_flags,
)
from mtc_local.workload.identity import (
    INIT_INFO_FILENAME,
    Identity,
    configure,
    read_init_info,
    resolve_identity,
)
from mtc_local.workload.schedule import local_save_due, persistent_save_due, save_due

__all__ = [
    "DEFAULT_STEPS", "EXIT_BAD_CONFIG", "EXIT_OK", "EXIT_RETRYABLE", "FLAG_SPECS", "INIT_INFO_FILENAME", "Config",
    "configure",
    "FlagError", "Identity", "RetryableError", "local_save_due", "parse_flags", "persistent_save_due",
    "read_init_info", "resolve_identity", "save_due",
]
