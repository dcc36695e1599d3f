"""A deferred task whose deferring process is reported after its resumed try started (tests/e2e/test_defer_race.py).

The benchmark's lost try, made certain instead of rare: `wait` defers on a trigger that fires at once, and its
deferring process does not end until the resumed try is running (an exit handler waits for the resumed try's
marker; a slow exit on a loaded machine does the same by chance). The worker reports that end as `success` for the
same try (local_executor.py `_run_worker`), so the scheduler meets it with the try `running`. The resumed try then
stays running long enough for the scheduler to read that report. `conf["dir"]` holds the markers.
"""

import datetime
import time
from pathlib import Path

from airflow.sdk import DAG, BaseOperator

EXIT_WAIT_S = 15  # below [core] task_success_overtime (20 s), after which the supervisor kills a deferred process
HOLD_S = 10  # the resumed try runs on this long after the deferring process ended: the scheduler reads its end


def _wait_for(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return path.exists()


class DeferThenHold(BaseOperator):
    def execute(self, context):
        import atexit

        from airflow.providers.standard.triggers.temporal import DateTimeTrigger
        from airflow.sdk import timezone

        markers = Path(context["dag_run"].conf["dir"])

        def end_after_the_resume():  # the task process runs exit handlers registered after its fork (supervisor)
            _wait_for(markers / "resumed", EXIT_WAIT_S)
            (markers / "deferring_process_ends").touch()

        atexit.register(end_after_the_resume)
        self.defer(trigger=DateTimeTrigger(moment=timezone.utcnow()), method_name="resume")

    def resume(self, context, event=None):
        markers = Path(context["dag_run"].conf["dir"])
        (markers / "resumed").touch()
        ended = _wait_for(markers / "deferring_process_ends", EXIT_WAIT_S + 15)
        time.sleep(HOLD_S)
        return {"try_number": context["ti"].try_number, "deferring_process_ended_during_resume": ended}


with DAG(dag_id="defer_race", schedule=None, start_date=datetime.datetime(2026, 1, 1), catchup=False):
    DeferThenHold(task_id="wait", executor="PreloadLocalExecutor", retries=0)
