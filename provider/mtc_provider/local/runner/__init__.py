"""The local JobSet runner: runs a rendered JobSet as local processes, with MTC ramdisks on tmpfs and faults.

`LocalJobSetApi(home)` / `AsyncLocalJobSetApi(home)` implement the JobSetApi / AsyncJobSetApi protocols; a
detached supervisor (one per home) owns the processes so a JobSet outlives the task that created it.
"""

from mtc_provider.local.runner.api import AsyncLocalJobSetApi, LocalJobSetApi

__all__ = ["AsyncLocalJobSetApi", "LocalJobSetApi"]
