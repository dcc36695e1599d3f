"""MaxText's command line: the entry point for the targeted release, then `key=value` arguments.

The container gets `command` (the entry point) and `args` (the flags) as separate lists, so no value is
ever parsed by a shell: a value with spaces or newlines stays one argument.

MaxText renamed its package in 0.2.0 (`MaxText` -> `maxtext`, trainer `maxtext.trainers.pre_train.train`) and
removed the old `MaxText` shim in 0.2.2. `workload.maxtext_layout` says which one an image has (docs/maxtext.md
has the version table); the multi-tier rules below are the ones MaxText 0.2.5 applies in
`maxtext/configs/types.py` (MaxTextConfig's validator), checked against it by tests/conformance.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from mtc_provider.core.basics.errors import SpecError, require
from mtc_provider.core.definition.render.graceful_exit import IN_CLUSTER, wrap_command

if TYPE_CHECKING:
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec

# MaxText config keys are Python identifiers (they become attributes of its config object).
FLAG_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FLAG_VALUE_TYPES = "a string, integer, float or true/false"
# Rendered only in multi-tier mode (MaxText's defaults are right otherwise), but never settable as extras.
MULTI_TIER_FLAGS = ("enable_multi_tier_checkpointing", "multi_tier_checkpointing_backup_interval_minutes",
                    "multi_tier_checkpointing_backup_interval_steps", "use_replicator_service")

# Entry modules and config path per package layout. The config path resolves both in a source checkout
# (the working directory of MaxText's images) and in a pip install (pyconfig.resolve_config_path).
MAXTEXT_LAYOUTS: dict[str, dict[str, str]] = {
    "current": {  # MaxText >= 0.2.0: package `maxtext`
        "train": "maxtext.trainers.pre_train.train",
        "decode": "maxtext.inference.decode",
        "config": "src/maxtext/configs/base.yml",
        "package": "maxtext",
    },
    "pre-rename": {  # images built before the rename (MaxText 0.1.x; 0.2.0-0.2.1 still carry a shim)
        "train": "MaxText.train",
        "decode": "MaxText.decode",
        "config": "MaxText/configs/base.yml",
        "package": "MaxText",
    },
}
DEFAULT_LAYOUT = "current"
LAYOUTS_ALLOWED = "current (MaxText 0.2.0 and later, package maxtext) or pre-rename (images with the MaxText package)"


LIGHT_WORKLOAD_MODULE = "mtc_local.light_workload"  # the local workload with a multi-tier mode


def maxtext_command(layout: str = DEFAULT_LAYOUT, entry: str = "train") -> tuple[str, ...]:
    """`python3 -m <entry module> <base config>` for a package layout (see MAXTEXT_LAYOUTS)."""
    require(layout in MAXTEXT_LAYOUTS, "workload.maxtext_layout", layout, LAYOUTS_ALLOWED)
    paths = MAXTEXT_LAYOUTS[layout]
    return ("python3", "-m", paths[entry], paths["config"])


def check_command_layout(command: tuple[str, ...], layout: str) -> None:
    """A `python -m` command naming the other layout's package is a contradiction: it would exit at once
    with `No module named ...`. Commands that run something else (a script, the local workload) pass."""
    require(layout in MAXTEXT_LAYOUTS, "workload.maxtext_layout", layout, LAYOUTS_ALLOWED)
    if "-m" not in command[:-1]:
        return
    module = command[command.index("-m") + 1]
    package = module.split(".", 1)[0]
    for other, paths in MAXTEXT_LAYOUTS.items():
        if other != layout and package == paths["package"]:
            raise SpecError(
                "workload.command", list(command),
                f"a module of the {layout} layout ({MAXTEXT_LAYOUTS[layout]['package']}.*, e.g. "
                f"{MAXTEXT_LAYOUTS[layout]['train']}), or set workload.maxtext_layout: {other}",
            )


def check_multi_tier(spec: "CheckpointingSpec") -> None:
    """MaxText's multi-tier rules (0.2.5, MaxTextConfig validator), plus ours: one local-tier mode at a time."""
    minutes = spec.multi_tier_checkpointing_backup_interval_minutes
    steps = spec.multi_tier_checkpointing_backup_interval_steps
    for name, value in (("minutes", minutes), ("steps", steps)):
        require(value is None or isinstance(value, int) and not isinstance(value, bool) and value > 0,
                f"checkpointing.multi_tier_checkpointing_backup_interval_{name}", value, "a positive integer or null")
    if not spec.enable_multi_tier_checkpointing:
        for name, value in (("multi_tier_checkpointing_backup_interval_minutes", minutes),
                            ("multi_tier_checkpointing_backup_interval_steps", steps),
                            ("use_replicator_service", spec.use_replicator_service or None)):
            require(value is None, f"checkpointing.{name}", value,
                    "unset unless enable_multi_tier_checkpointing is true")
        return
    require(not spec.enable_emergency_checkpoint, "checkpointing.enable_emergency_checkpoint", True,
            "false when enable_multi_tier_checkpointing is true (one local-checkpoint mode at a time)")
    require((minutes is None) != (steps is None), "checkpointing.multi_tier_checkpointing_backup_interval_minutes",
            minutes, "exactly one of multi_tier_checkpointing_backup_interval_minutes and "
            f"multi_tier_checkpointing_backup_interval_steps (steps: {steps!r})")
    if steps is not None:
        require(steps >= spec.local_checkpoint_period, "checkpointing.multi_tier_checkpointing_backup_interval_steps",
                steps, f"an integer >= local_checkpoint_period ({spec.local_checkpoint_period})")


def check_target_mode(target: str, local_processes: bool, spec: "CheckpointingSpec",
                      command: Sequence[str] | None = None) -> None:
    """Multi-tier mode on the local target: the local runner's replicator (mtc_local.runner.replicator) backs the
    ramdisks up and restores them, and the light workload is the one that saves only its local tier, as MaxText
    does in this mode; the JAX workload has Orbax's emergency manager only."""
    if not local_processes or not spec.enable_multi_tier_checkpointing:  # the kind's rules (core.basics.kind_rules)
        return
    require(LIGHT_WORKLOAD_MODULE in tuple(command or ()), "checkpointing.enable_multi_tier_checkpointing", True,
            f"false on the {target} target unless the workload is the light one (workload.command "
            f"['python', '-m', '{LIGHT_WORKLOAD_MODULE}']); the JAX workload has no multi-tier mode, "
            "use enable_emergency_checkpoint")
    require(spec.base_output_directory.startswith("/"), "checkpointing.base_output_directory",
            spec.base_output_directory, f"a local path on the {target} target in multi-tier mode (the replicator "
            "backs up to <bucket folder>/<run_name>)")


def last_step(checkpointing: "CheckpointingSpec", workload: "WorkloadSpec") -> int:
    """The step of a finished run's last checkpoint. MaxText counts steps from 0: `steps=N` runs steps 0..N-1
    and saves N-1 last (tests/conformance/test_real_maxtext_cpu.py); other commands (the local workload) end at N."""
    command = tuple(workload.command or ())
    if "-m" in command[:-1]:
        package = command[command.index("-m") + 1].split(".", 1)[0]
        if package in {paths["package"] for paths in MAXTEXT_LAYOUTS.values()}:
            return max(checkpointing.steps - 1, 0)
    return checkpointing.steps


def flag_text(value: Any) -> str:
    """A value MaxText reads: bool before int (True is an int in Python), and MaxText expects True/False."""
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def render_value(value: Any, field: str) -> str:
    """A flag value that no spec has checked (workload.extra_flags): refused unless MaxText can parse it."""
    if not isinstance(value, (bool, int, float, str)):
        raise SpecError(field, value, FLAG_VALUE_TYPES)
    return flag_text(value)


def render_flags(flags: Mapping[str, Any], field_prefix: str = "flags") -> list[str]:
    """`{"steps": 100, "async_checkpointing": True}` -> `["steps=100", "async_checkpointing=True"]`, in order."""
    rendered = []
    for key, value in flags.items():
        field = f"{field_prefix}.{key}"
        if not isinstance(key, str) or not FLAG_KEY_RE.match(key):
            raise SpecError(field, key, "a MaxText config key: letters, digits and '_', not starting with a digit")
        rendered.append(f"{key}={render_value(value, field)}")
    return rendered


# The flags the checkpointing section owns (CheckpointingSpec.maxtext_flags' keys, in its order): never extras.
RESERVED_FLAGS = ("run_name", "base_output_directory", "steps", "enable_checkpointing", "enable_emergency_checkpoint",
                  "async_checkpointing", "local_checkpoint_directory", "local_checkpoint_period", "checkpoint_period",
                  "enable_single_replica_ckpt_restoring", "enable_autocheckpoint", *MULTI_TIER_FLAGS)
PRE_RENAME_UNKNOWN = ("multi_tier_checkpointing_backup_interval_steps", "use_replicator_service")


def check_container_flags(checkpointing: "CheckpointingSpec", workload: "WorkloadSpec") -> None:
    """The rules across the checkpointing and workload sections that the container's flags obey (layout vs flags,
    extras vs the checkpointing flags), without rendering them: `core.definition.description.run.parse_run` and `container_command` call it."""
    for key, value in (workload.extra_flags or {}).items():
        require(key not in RESERVED_FLAGS, f"workload.extra_flags.{key}", value,
                f"a flag other than the checkpointing ones ({', '.join(RESERVED_FLAGS)}); set it in the checkpointing "
                "section")
        # OmegaConf (MaxText's command-line parser) reads `key=` as null, not as an empty string.
        require(value != "", f"workload.extra_flags.{key}", value,
                "a non-empty value (MaxText reads `key=` as null); leave the flag out for MaxText's default")
    if workload.maxtext_layout != DEFAULT_LAYOUT and checkpointing.enable_multi_tier_checkpointing:
        for key in PRE_RENAME_UNKNOWN:
            value = getattr(checkpointing, key)
            require(value in (None, False), f"checkpointing.{key}", value,
                    "unset with workload.maxtext_layout pre-rename (MaxText 0.1 has no such key; it came with 0.2)")


def container_command(checkpointing: "CheckpointingSpec", workload: "WorkloadSpec") -> tuple[list[str], list[str]]:
    """(command, args) for the training container: the entry point, then every checkpointing flag and extra flag.

    run_name and base_output_directory are always passed, so a resubmitted run resumes from its own
    checkpoints; extra flags may add MaxText settings but never override the checkpointing ones. The
    checkpointing flags come from a validated spec and are rendered as they are (nothing checks them again).
    With `workload.graceful_preemption: in_cluster` the entry point runs under core.definition.render.graceful_exit's
    wrapper, told the last step: a SIGTERM below it then ends the container with 143, a restart in the cluster.
    """
    check_container_flags(checkpointing, workload)
    owned = checkpointing.maxtext_flags()
    if workload.maxtext_layout != DEFAULT_LAYOUT and not owned["enable_autocheckpoint"]:
        del owned["enable_autocheckpoint"]  # MaxText 0.1.0 refuses the key; false is every release's default
    args = [f"{key}={flag_text(value)}" for key, value in owned.items()]
    command = list(workload.command)
    if workload.graceful_preemption == IN_CLUSTER:
        command = wrap_command(command, last_step(checkpointing, workload))
    return command, args + render_flags(dict(workload.extra_flags or {}), "workload.extra_flags")
