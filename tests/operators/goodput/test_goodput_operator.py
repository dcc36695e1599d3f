"""GoodputReportOperator on both sources: the local workload's event files, and checkpoint commit times."""

from __future__ import annotations

import os

import pytest
from tests.core.test_goodput import EXPECTED

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.adapters.workload_events import append_event, events_path
from mtc_provider.operators.goodput import GoodputReportOperator

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_local_events_give_report_and_chart(tmp_path):
    base = str(tmp_path)
    path = events_path(base, "run", 0)
    script = [(0, "start", 0, {}), (20, "step", 1, {}), (30, "step", 2, {}),
              (30, "save_start", 2, {"tier": "persistent", "blocking_s": 2}), (33, "save_end", 2, {"tier": "persistent", "duration_s": 3}),
              (42, "step", 3, {}), (52, "step", 4, {}), (55, "preempted", 4, {}),
              (60, "start", 0, {}), (70, "restore", 2, {"tier": "persistent", "duration_s": 5}), (85, "step", 3, {}),
              (95, "step", 4, {}), (100, "error", 4, {}),
              (110, "start", 0, {}), (114, "restore", 2, {"tier": "local", "duration_s": 2}), (124, "step", 3, {}),
              (134, "step", 4, {}), (140, "finish", 4, {"params_sha256": "x"})]
    for ts, event, step, extra in script:
        append_event(path, ts=ts, event=event, process=0, step=step, **extra)
    operator = GoodputReportOperator(task_id="goodput", checkpoint_dir=f"{base}/run/checkpoints",
                                     events_dir=os.path.dirname(path))
    result = operator.execute({"run_id": "r1"})
    assert result["source"] == "workload events"
    assert {k: result[k] for k in EXPECTED} == EXPECTED
    with open(result["chart_path"], "rb") as chart:
        assert chart.read(8) == PNG_MAGIC


def test_gke_source_from_commit_times(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    for step, mtime in [(100, 1000.0), (200, 2000.0), (300, 3600.0), (400, 4100.0)]:
        (checkpoints / str(step)).mkdir(parents=True)
        marker = checkpoints / str(step) / "commit_success.txt"
        marker.write_text("")
        os.utime(marker, (mtime, mtime))
    (checkpoints / "500.orbax-checkpoint-tmp").mkdir()
    attempts = [{"start": 0, "end": 2500, "outcome": "disrupted"}, {"start": 2600, "end": 4100, "outcome": "finished"}]
    operator = GoodputReportOperator(task_id="goodput", checkpoint_dir=str(checkpoints), attempts=attempts,
                                     chart_path=str(tmp_path / "out" / "g.png"))
    result = operator.execute({"run_id": "r2"})
    assert result["source"] == "checkpoint commit times"
    # Intervals 1000, 1000, 1000 (a1 starts at 2600 with no restore record), 500; ideal = median(1000, 500) = 750.
    # Attempt 1 resumed without a restore record, so attempt 0's progress counts as lost (restored step 0).
    assert result["disruptions"] == 1 and result["last_productive_step"] == 400
    assert result["badput_s"]["wasted_progress"] == 750 + 1000
    assert (tmp_path / "out" / "g.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("attempts, field", [
    ([{"start": "x"}], r"attempts\[0\]\.start: 'x'"), ([{"end": 5.0}], r"attempts\[0\]\.start: None"),
    ([{"start": 0, "end": 5, "outcome": "fine"}], r"attempts\[0\]\.outcome"), ('{"start": 0}', r"attempts: "),
])
def test_bad_attempts_name_the_field(tmp_path, attempts, field):
    operator = GoodputReportOperator(task_id="goodput", checkpoint_dir=str(tmp_path), attempts=attempts)
    with pytest.raises(SpecError, match=field):
        operator.execute({"run_id": "r3"})


class _TI:
    def __init__(self) -> None:
        self.xcoms: dict = {}

    def xcom_push(self, key, value) -> None:
        self.xcoms[key] = value


def test_local_target_gets_the_goodput_chart_link_as_a_file_url(tmp_path):
    """The "Goodput chart" extra link exists on the local target too: a file:// URL that opens the PNG just drawn
    (quoted, like the checkpoint-folder link, so a path with spaces still opens)."""
    from urllib.parse import unquote, urlparse

    from mtc_provider.links.goodput import GoodputChartLink

    base = tmp_path / "my runs"
    path = events_path(str(base), "run", 0)
    for ts, event, step in [(0, "start", 0), (10, "step", 1), (20, "step", 2), (30, "finish", 2)]:
        append_event(path, ts=ts, event=event, process=0, step=step)
    ti = _TI()
    operator = GoodputReportOperator(task_id="goodput", checkpoint_dir=f"{base}/run/checkpoints",
                                     events_dir=os.path.dirname(path))
    result = operator.execute({"run_id": "r3", "ti": ti})
    url = ti.xcoms[GoodputChartLink.key]
    assert url.startswith("file:///") and " " not in url
    opened = unquote(urlparse(url).path)
    assert opened == os.path.abspath(result["chart_path"])
    with open(opened, "rb") as chart:
        assert chart.read(8) == PNG_MAGIC


def test_chart_url_on_each_target():
    from mtc_provider.links.goodput import chart_url

    assert chart_url("gs://ckpt/run/goodput/r1.png") == \
        "https://console.cloud.google.com/storage/browser/_details/ckpt/run/goodput/r1.png"
    assert chart_url("/data/run a/goodput.png") == "file:///data/run%20a/goodput.png"


def test_the_chart_draws_the_local_tiers_saves(tmp_path):
    """Issue 35 item 3: the emergency (local) tier's saves are drawn, beside the persistent ones."""
    from PIL import Image

    from mtc_provider.core.view.goodput import Attempt, Save, StepRecord, Timeline, compute_goodput
    from mtc_provider.operators.goodput import render_chart

    timeline = Timeline(attempts=[Attempt(0.0, 10.0, "finished")],
                        steps=[StepRecord(0, s, float(s)) for s in range(1, 10)],
                        saves=[Save(4, 4.0, 0.1, None, "local"), Save(8, 8.0, 0.1, None, "local"),
                               Save(5, 5.0, 0.2, None, "persistent")])
    path = render_chart(timeline, compute_goodput(timeline), tmp_path / "c.png", title="t")
    drawn = Image.open(path).info["Description"]
    assert "local-tier checkpoints" in drawn and "persistent checkpoints" in drawn, drawn
