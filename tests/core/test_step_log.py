"""The workload's step from its own log lines (core.measure.step_log), on lines in the exact formats the workloads print.

MaxText: `MetricLogger.log_metrics` (AI-Hypercomputer/maxtext src/MaxText/metric_logger.py) logs
`completed step: {step}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, total_weights: {},
loss: {:.3f}` through max_logging (absl: `I<mmdd> <time> <tid> <file>:<line>] ` before it); releases before the
MetricLogger class logged `completed step: {step}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, loss: {:.3f}` from
max_utils/train.py. The local workload prints `completed step: N, seconds: X, loss: Y`
(rehearsal/mtc_local/workload/training.py).
"""

from __future__ import annotations

import pytest

from mtc_provider.core.measure.step_log import (Restore, StepLine, bounded_lines, latest_step_line, parse_restore,
                                               parse_saved_tiers, parse_step_line)

MAXTEXT = ("I1201 11:02:03.456789 140230 metric_logger.py:184] completed step: 1200, seconds: 2.481, "
           "TFLOP/s/device: 187.302, Tokens/s/device: 6603.911, total_weights: 1048576, loss: 7.412")
MAXTEXT_MTP = MAXTEXT + ", main_model_loss: 7.100, mtp_loss: 0.312"
MAXTEXT_OLD = "completed step: 99, seconds: 0.871, TFLOP/s/device: 95.120, loss: 10.284"
LOCAL = "completed step: 7, seconds: 0.053, loss: 0.412345"
RUNNER_FAKE = "completed step: 3, process 1"  # the runner tests' stand-in workload


def test_maxtext_lines():
    assert parse_step_line(MAXTEXT) == StepLine(1200, 2.481, 7.412)
    assert parse_step_line(MAXTEXT_MTP) == StepLine(1200, 2.481, 7.412)  # `loss`, not main_model_loss/mtp_loss
    assert parse_step_line(MAXTEXT_OLD) == StepLine(99, 0.871, 10.284)


def test_local_workload_and_stand_in_lines():
    assert parse_step_line(LOCAL) == StepLine(7, 0.053, 0.412345)
    assert parse_step_line(RUNNER_FAKE) == StepLine(3, None, None)


def test_other_lines_are_not_steps():
    for line in ("eval metrics after step: 1000, loss=7.100, total_weights=1048576",
                 "Successfully completed step: createSecret", "saving checkpoint at step 1200",
                 "To see full metrics 'tensorboard --logdir=gs://b/run/tensorboard/'", ""):
        assert parse_step_line(line) is None, line


def test_latest_is_the_last_step_line():
    lines = [LOCAL, "saved checkpoint 7", LOCAL.replace("step: 7", "step: 8"), "preempted at step 8"]
    assert latest_step_line(lines).step == 8
    assert latest_step_line(["no steps here"]) is None


def test_bounds_keep_the_newest_lines_and_count_the_rest():
    lines = [f"line {i}" for i in range(10)]
    assert bounded_lines(lines, 3, 10_000) == (["line 7", "line 8", "line 9"], 7)
    kept, left_out = bounded_lines(lines, 100, 14)  # "line 9\n" is 7 bytes: two fit
    assert kept == ["line 8", "line 9"] and left_out == 8
    huge = ["x" * 5000]
    kept, left_out = bounded_lines(huge, 10, 100)
    assert len(kept[0].encode()) <= 100 and kept[0].endswith("...") and left_out == 0
    assert bounded_lines([], 5, 100) == ([], 0)


@pytest.mark.parametrize("line, restore", [
    # MaxText (src/MaxText/checkpointing.py, load_state_if_possible): the step, no tier
    ("I1201 11:00:00.1 1 checkpointing.py:420] restoring from this run's directory step 1200", Restore(1200)),
    # the local workloads after their restore (rehearsal/mtc_local/workload/checkpointing.py)
    ("restored step 40 from tier local in 1.250s", Restore(40, "local", 1.25)),
    ("restored step 40 from tier persistent", Restore(40, "persistent", None)),
    ("restoring checkpoint soon", None),
])
def test_restore_lines_with_their_tier_and_seconds_where_they_say_them(line, restore):
    assert parse_restore(line) == restore


@pytest.mark.parametrize("line, saved", [
    ("saved step 40 (tiers: local,persistent; blocking 0.012s)", (40, ("local", "persistent"))),
    ("saved step 41 (tiers: -; blocking 0.000s)", (41, ())),
    ("saving checkpoint at step 1200", None),
])
def test_the_workload_s_save_lines_name_their_tiers(line, saved):
    assert parse_saved_tiers(line) == saved
