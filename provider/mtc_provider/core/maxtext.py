"""MaxText's command line: `key=value` arguments, one list element each, never a shell string.

The container gets `command` (the entry point) and `args` (the flags) as separate lists, so no value is
ever parsed by a shell: a value with spaces or newlines stays one argument.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from mtc_provider.core.errors import SpecError
from mtc_provider.core.spec import CheckpointingSpec, WorkloadSpec

# MaxText config keys are Python identifiers (they become attributes of its config object).
FLAG_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FLAG_VALUE_TYPES = "a string, integer, float or true/false"


def render_value(value: Any, field: str) -> str:
    # bool before int: True is an int in Python, and MaxText expects the words True/False.
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise SpecError(field, value, FLAG_VALUE_TYPES)


def render_flags(flags: Mapping[str, Any], field_prefix: str = "flags") -> list[str]:
    """`{"steps": 100, "async_checkpointing": True}` -> `["steps=100", "async_checkpointing=True"]`, in order."""
    rendered = []
    for key, value in flags.items():
        field = f"{field_prefix}.{key}"
        if not isinstance(key, str) or not FLAG_KEY_RE.match(key):
            raise SpecError(field, key, "a MaxText config key: letters, digits and '_', not starting with a digit")
        rendered.append(f"{key}={render_value(value, field)}")
    return rendered


def container_command(checkpointing: CheckpointingSpec, workload: WorkloadSpec) -> tuple[list[str], list[str]]:
    """(command, args) for the training container: the entry point, then every checkpointing flag and extra flag.

    run_name and base_output_directory are always passed, so a resubmitted run resumes from its own
    checkpoints; extra flags may add MaxText settings but never override the checkpointing ones.
    """
    owned = checkpointing.maxtext_flags()
    extra = dict(workload.extra_flags or {})
    for key in extra:
        if key in owned:
            raise SpecError(
                f"workload.extra_flags.{key}",
                extra[key],
                f"a flag other than the checkpointing ones ({', '.join(owned)}); set it in the checkpointing section",
            )
    args = render_flags(owned, "checkpointing") + render_flags(extra, "workload.extra_flags")
    return list(workload.command), args
