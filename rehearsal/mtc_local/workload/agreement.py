"""What the processes of one start agree on through their coordinator, as plain-value rules (pure).

The JAX workload gets both answers from JAX and Orbax; the light workload, which has no coordinator, computes them
from what its processes post in a shared folder (`workload.sync_folder`):

- which step a start restores: Orbax's emergency manager restores the newest step that some slice holds complete in
  its ramdisks (every host of that slice has it: `_find_slice_with_complete_local_checkpoint`, then a broadcast to
  the other slices), unless the persistent tier holds a newer one;
- whether a SIGTERM ends in a save: JAX's preemption sync is a barrier over every process of the job, so a save
  happens only when every process takes part. A lost host (the survivors of a JobSet restart), a hung process or a
  host the notice never reached before its grace period ended leaves the others without a save.
"""

from __future__ import annotations

PERSISTENT, LOCAL = "persistent", "local"


def newest_complete_local_step(local_steps: dict[int, list[int]], hosts_per_slice: int) -> int | None:
    """The newest step that every host of one slice holds in its ramdisk; `local_steps` maps process id -> steps."""
    by_slice: dict[int, list[set[int]]] = {}
    for process_id, steps in local_steps.items():
        by_slice.setdefault(process_id // hosts_per_slice, []).append(set(steps))
    complete = [max(set.intersection(*held)) for held in by_slice.values()
                if len(held) == hosts_per_slice and set.intersection(*held)]
    return max(complete, default=None)


def restore_choice(persistent_newest: int | None, local_newest: int | None) -> tuple[int, str | None]:
    """(step, tier) a start restores: the local tier when a slice holds a step at least as new as the newest
    finalized persistent one (read from memory, as Orbax prefers), else the persistent tier; (0, None) for none."""
    if local_newest is not None and local_newest >= (persistent_newest or 0) and local_newest > 0:
        return local_newest, LOCAL
    if persistent_newest:
        return persistent_newest, PERSISTENT
    return 0, None


def preemption_step(posted: dict[int, int], num_processes: int) -> int | None:
    """The step every process saves at once each of the job's processes has taken part in the preemption sync
    (`posted`: process id -> the step it had reached), as JAX agrees on one sync step; None while one is missing."""
    if set(posted) != set(range(num_processes)):
        return None
    return max(posted.values())


def hung(gap_s: float, step_time_s: float) -> bool:
    """Whether a process that has just been resumed (SIGCONT) had been stopped: no step for far longer than a step
    takes. A hung process never reaches a collective again: it must not take part in a preemption sync."""
    return gap_s > max(2.0, 20 * step_time_s)
