"""Run inside the MaxText environment (Python 3.12): MaxText's own config loader on rendered commands.

    <maxtext python> maxtext_probe.py < cases.json > results.json

stdin: a JSON list of {"name", "command", "args"}; `command` is the container's command
(`python3 -m <module> [<config>]`). For each case the module is located as `python3 -m` would (it must
exist in this release), argv is built as `python -m` builds it (argv[0] = the module's file), and
`pyconfig.initialize(argv)` runs unchanged, except that JAX's distributed start-up is replaced by recorders
(on a TPU it would wait for peers). stdout: a JSON list of {"name", "ok", "error", "values",
"distributed"}: `values` holds what MaxText parsed for every key of `args`, `distributed` which start-up
MaxText chose (and with which arguments).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import traceback
from typing import Any


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "value") and isinstance(getattr(value, "value"), (str, int)):  # enums
        return value.value
    return str(value)


def patch_distributed_start(calls: list) -> None:
    """MaxText's start-up paths end in these three calls; record them instead of waiting for a TPU."""
    import jax

    def recorder(name: str):
        def record(*args, **kwargs):
            calls.append({"call": name, "kwargs": {k: jsonable(v) for k, v in kwargs.items()},
                          "args": [jsonable(a) if not isinstance(a, dict) else "<raw_keys>" for a in args]})
        return record

    jax.distributed.initialize = recorder("jax.distributed.initialize")
    for module_name in ("maxtext.utils.max_utils", "MaxText.max_utils"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in ("initialize_multi_tier_checkpointing", "initialize_jax_for_tpu_with_emergency_checkpointing"):
            if hasattr(module, name):
                setattr(module, name, recorder(name))


def load_pyconfig():
    for name in ("maxtext.configs.pyconfig", "MaxText.pyconfig"):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] not in ("maxtext", "MaxText"):
                raise
    raise ModuleNotFoundError("neither maxtext.configs.pyconfig nor MaxText.pyconfig")


def argv_for(command: list[str], args: list[str]) -> list[str]:
    """argv as `python3 -m module rest...` gives it to the module: [module file, *rest, *args]."""
    if "-m" not in command:
        raise ValueError(f"not a `python -m` command: {command}")
    at = command.index("-m")
    module = command[at + 1]
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(f"No module named {exc.name!r}") from exc
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"No module named {module!r}")
    return [spec.origin, *command[at + 2:], *args]


def run_case(pyconfig, case: dict) -> dict:
    calls: list = []
    patch_distributed_start(calls)
    result: dict[str, Any] = {"name": case["name"], "ok": False, "error": "", "values": {}, "distributed": calls}
    try:
        argv = argv_for(case["command"], case["args"])
        config = pyconfig.initialize(argv)
        keys = config.get_keys() if hasattr(config, "get_keys") else {}
        for arg in case["args"]:
            key = arg.split("=", 1)[0]
            result["values"][key] = jsonable(keys[key] if key in keys else getattr(config, key))
        result["ok"] = True
    except BaseException as exc:  # SystemExit included: MaxText exits 2 on a config error
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-4000:]
    return result


def main() -> None:
    cases = json.load(sys.stdin)
    pyconfig = load_pyconfig()
    # Raise instead of sys.exit(2) so the error text reaches the test (the check itself is unchanged).
    if hasattr(pyconfig, "_handle_config_exception"):
        def reraise(exc):
            raise exc
        pyconfig._handle_config_exception = reraise
    results = [run_case(pyconfig, case) for case in cases]
    sys.stdout.write("\n" + json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
