"""Writes real Orbax checkpoints for the tests: `python orbax_writer.py DIR STEP [STEP ...] [--kill-during-save STEP]`;
`python orbax_writer.py --list DIR` prints Orbax's read-only listing.

With --kill-during-save the process SIGKILLs itself while that step's async save is in flight, leaving what a
preempted save leaves (a `<step>.orbax-checkpoint-tmp` dir locally, an uncommitted `<step>/` on GCS).
"""

import os
import signal
import sys

import numpy as np
import orbax.checkpoint as ocp


def list_steps(directory: str) -> None:
    """Print Orbax's own read-only view of the directory as JSON (the reference the store must match)."""
    import json

    options = ocp.CheckpointManagerOptions(read_only=True)
    steps = sorted(ocp.CheckpointManager(directory, options=options).all_steps())
    print(json.dumps(steps))


def main(argv: list[str]) -> None:
    if argv[0] == "--list":
        return list_steps(argv[1])
    directory, rest = argv[0], argv[1:]
    kill_step = None
    if "--kill-during-save" in rest:
        index = rest.index("--kill-during-save")
        kill_step = int(rest[index + 1])
        rest = rest[:index] + rest[index + 2:]
    options = ocp.CheckpointManagerOptions(max_to_keep=None, enable_async_checkpointing=True)
    manager = ocp.CheckpointManager(directory, options=options)
    state = {"w": np.arange(16, dtype=np.float32)}
    for step in map(int, rest):
        manager.save(step, args=ocp.args.StandardSave(state))
        manager.wait_until_finished()
    if kill_step is not None:
        big = {"w": np.ones((64, 1024, 1024), dtype=np.float32)}  # 256 MiB: the save is still running at the kill
        manager.save(kill_step, args=ocp.args.StandardSave(big))
        os.kill(os.getpid(), signal.SIGKILL)
    manager.close()


if __name__ == "__main__":
    main(sys.argv[1:])
