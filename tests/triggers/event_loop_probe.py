"""Run in a fresh interpreter by test_trigger_event_loop.py: a JobSetTrigger's first run() on an event loop in
asyncio's debug mode, cold (nothing of the trigger's clients imported yet, as in a triggerer's first JobSet
trigger), against a local cluster. Prints JSON: the callbacks that held the loop longer than
`loop.slow_callback_duration` (asyncio logs each as "Executing <Task ...> took N seconds"), the trigger module's
own import time, and the api's answer count (proof that the watch ran).

argv: home, JobSet name, checkpoint directory, seconds to run, slow-callback threshold (s).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time

import airflow.jobs.triggerer_job_runner  # noqa: F401 - what a triggerer process has loaded before any trigger
import airflow.triggers.base  # noqa: F401

home, name, checkpoint_dir, run_for, threshold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), \
    float(sys.argv[5])
slow: list[dict] = []


class _Slow(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        took = re.search(r"took ([0-9.]+) seconds", text)
        if took:
            where = re.findall(r"running at (\S+?)>", text)
            slow.append({"seconds": float(took.group(1)), "where": where[:2], "what": text[:160]})


started = time.monotonic()
from mtc_provider.core.attempt.launch_options import PodLogs, WatchSettings, WatchTimes
from mtc_provider.triggers.jobset import JobSetTrigger  # noqa: E402 - timed: the triggerer imports it on its loop

import_s = time.monotonic() - started
logging.getLogger("asyncio").addHandler(_Slow())
logging.getLogger("asyncio").setLevel(logging.WARNING)
apis: list = []  # the hooks the trigger made (each with its api)


async def main() -> None:
    asyncio.get_running_loop().slow_callback_duration = threshold
    trigger = JobSetTrigger(connection={"kind": "local", "home": home}, namespace="default", name=name,
                            checkpoint_dir=checkpoint_dir,
                            watch=WatchSettings(times=WatchTimes(poll_interval=1.0, progress_interval=2),
                                                pod_logs=PodLogs(enabled=True, interval=2), stall_timeout=600))
    made = trigger.build_hook
    trigger.build_hook = lambda: apis.append(made()) or apis[-1]
    events = trigger.run()
    first = asyncio.ensure_future(events.__anext__())
    deadline = time.monotonic() + run_for
    while time.monotonic() < deadline and not (apis and apis[0].api.answers >= 2) and not first.done():
        await asyncio.sleep(0.2)
    await asyncio.sleep(3 * trigger.watch.times.poll_interval)  # a few rounds of the watch and the pod and progress checks
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)


asyncio.run(main(), debug=True)
print(json.dumps({"import_s": import_s, "slow": slow, "answers": apis[0].api.answers if apis else 0}))
