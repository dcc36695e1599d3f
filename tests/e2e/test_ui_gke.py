"""The run view of a GKE-shaped run in a real api-server, watched in a real browser (issue 35, "Done when").

A real Airflow api-server (with the provider's plugin) on 127.0.0.1 and Debian's Chromium driven by Playwright. The
run is in Airflow's real database as a deferred launch try leaves it: the DAG of tests/plugins/dags/run_view_shapes.py
ran with dag.test() in Airflow's environment (its launch task pushes the XComs the operator pushes), then the try is
put in state `deferred` with its JobSetTrigger row (tests/plugins/test_run_view_gke.deferred). No scheduler or
triggerer runs, so nothing else moves that state. The cluster is the Kubernetes API double on 127.0.0.1 (the pod
list and `read log` with `tailLines`/`timestamps` as the Pod v1 reference documents), reached through an Airflow
Kubernetes connection (a kubeconfig), as a kubernetes target reaches any cluster; the leader's lines are MaxText's.

The browser opens the run's "Training run" tab and sees: the step of the newest log line, and a new line's step
within one page refresh; goodput while the run goes on; the restore MaxText logged; the chart. A second run is the
GKE-shaped day of tests/core/day_run.py moved to end now (30 hours, three attempts over two tries, a live in-cluster
restart, its `ledger` XCom): every figure the page shows of it is checked against that ledger. On an unrelated DAG's
run (Airflow 3.3.2 still shows the tab: docs/run-view.md, "Only on training runs") the tab is a static sentence and
the page asks nothing of the run view's API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from airflow_harness import (ARTIFACTS, BROWSER_ARGS, CHROMIUM, REPO, AirflowServer, doc_images, free_port,
                             server_env, wait_for)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CONN = "k8s_run_view"
LEADER = "train-a1-slice-0-0-aaaaa"
DAY_LEADER = "train-a3-slice-0-0-bbbbb"  # the day run's live attempt 3
REFRESH_S = 3.0 + 2.0  # the page's poll and the api-server's cluster cache (adapters/run_cluster.CACHE_SECONDS)
PLANT = """
import json, os, sys, time
sys.path.insert(0, os.environ["MTC_REPO"])
import importlib.util
from tests.plugins.test_run_view_gke import deferred, T0
spec = importlib.util.spec_from_file_location("shapes", os.environ["MTC_SHAPES"])
shapes = importlib.util.module_from_spec(spec); spec.loader.exec_module(shapes)
now = time.time()
os.environ["MTC_TEST_MTC_RUN"] = json.dumps({"checkpoint_dir": "gs://ckpt/runs/r/checkpoints", "target_step": 4000})
os.environ["MTC_TEST_ATTEMPTS"] = json.dumps([
    {"attempt": 1, "jobset": "train-a0", "start": now - 3600, "end": now - 1900, "outcome": "disrupted",
     "restarts": 0, "last_step": 700, "reason": "JobSet failed (FailedJobs)"},
    {"attempt": 2, "jobset": "train-a1", "start": now - 1800, "end": None, "outcome": None, "restarts": 0}])
os.environ["MTC_TEST_PROGRESS"] = json.dumps({"step": 900, "target_step": 4000, "steps_per_hour": 1500.0,
                                              "source": "workload-log", "updated_at": now - 300})
training = shapes.gke_shaped.test().run_id
deferred(training)
from tests.core import day_run
by = now - day_run.NOW  # the day ends now
os.environ["MTC_TEST_MTC_RUN"] = json.dumps({"checkpoint_dir": "gs://ckpt/runs/day/checkpoints", "target_step": 100000})
os.environ["MTC_TEST_ATTEMPTS"] = json.dumps(day_run.shifted(day_run.ATTEMPTS, by))
os.environ["MTC_TEST_PROGRESS"] = json.dumps(day_run.shifted(day_run.PROGRESS, by))
os.environ["MTC_TEST_LEDGER"] = json.dumps(day_run.shifted(day_run.ledger(), by))
import datetime as dt
when = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)
day = shapes.gke_shaped.test(logical_date=when, run_after=when).run_id
deferred(day, jobset="train-a3")
del os.environ["MTC_TEST_LEDGER"]
print(json.dumps({"training": training, "day": day, "by": by, "unrelated": shapes.unrelated.test().run_id}))
"""


def maxtext_line(step: int) -> str:
    return (f"I1202 08:00:00.123456 140 metric_logger.py:196] completed step: {step}, seconds: 2.276, "
            f"TFLOP/s/device: 412.000, Tokens/s/device: 900.000, total_weights: 2048, loss: 2.345")


class ApiServerOnly(AirflowServer):
    """Only the api-server: no scheduler or triggerer may move the planted run (the harness's other parts)."""

    def start(self) -> None:
        import signal as signals

        (self.home / "component-logs").mkdir(parents=True, exist_ok=True)
        migrate = subprocess.run([self.airflow, "db", "migrate"], env=self.env, capture_output=True, text=True,
                                 timeout=300)
        assert migrate.returncode == 0, migrate.stderr[-3000:]
        with open(self.log_path("api-server"), "ab") as log:
            self.procs["api-server"] = subprocess.Popen(
                [self.airflow, "api-server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"],
                env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=lambda: signals.signal(signals.SIGINT, signals.SIG_DFL))
        wait_for("the api-server to answer", self._health_all_ok, 240, alive=self.check_alive)
        self.password = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())[
            self.username]

    def _health_all_ok(self) -> bool:
        health = requests.get(f"{self.base_url}/api/v2/monitor/health", timeout=10).json()
        return (health.get("metadatabase") or {}).get("status") == "healthy"


@pytest.fixture(scope="module")
def cluster():
    sys.path.insert(0, str(REPO))
    from tests.adapters.test_js_pod_logs import add_pod
    from tests.doubles.kubernetes import KubernetesApiDouble

    double = KubernetesApiDouble().start()
    add_pod(double, LEADER, 0, 0, jobset="train-a1")
    now = time.time()
    double.write_log(LEADER, *[f"I1202 config key_{i}: value" for i in range(300)], at=now - 1700)
    double.write_log(LEADER, "I1202 restoring from this run's directory step 700", at=now - 1699)
    add_pod(double, DAY_LEADER, 0, 0, jobset="train-a3")
    yield double
    double.stop()


@pytest.fixture(scope="module")
def planted(cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("gke-view")
    home, local_home = root / "airflow", root / "mtc-local"
    home.mkdir()
    local_home.mkdir()
    kubeconfig = root / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "double",
        "clusters": [{"name": "double", "cluster": {"server": cluster.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "u"}}]}))
    port = free_port()
    dags = REPO / "tests" / "plugins" / "dags"
    env = server_env(home, local_home, port, dags, {
        f"AIRFLOW_CONN_{CONN.upper()}": json.dumps({"conn_type": "kubernetes",
                                                    "extra": {"kube_config_path": str(kubeconfig)}}),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([
            {"name": "mtc-plugin-tests", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
             "kwargs": {"path": str(dags)}}])})
    server = ApiServerOnly(home=home, local_home=local_home, port=port, env=env)
    try:
        server.start()
        done = subprocess.run([sys.executable, "-c", PLANT], capture_output=True, text=True, timeout=600,
                              env={**env, "MTC_REPO": str(REPO), "MTC_SHAPES": str(dags / "run_view_shapes.py")})
        assert done.returncode == 0, done.stderr[-4000:]
        runs = json.loads(done.stdout.strip().splitlines()[-1])
        # the run labels the launch operator puts on its pods: the view reads only the run's own pods
        from mtc_provider.core.basics.labels import run_labels

        cluster.pods[0]["metadata"]["labels"].update(run_labels("mtc_gke_shaped", runs["training"], "train", "r"))
        cluster.pods[1]["metadata"]["labels"].update(run_labels("mtc_gke_shaped", runs["day"], "train", "r"))
        yield server, runs
    finally:
        killed = server.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        if server.log_path("api-server").exists():
            (ARTIFACTS / "gke-view-api-server.log").write_text(server.log_tail("api-server", 400))
        assert not killed, killed


@pytest.fixture(scope="module")
def page(planted):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run .ci/install-browser")
    from playwright.sync_api import sync_playwright

    server, _ = planted
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 1000})
        context.set_default_timeout(60_000)
        page = context.new_page()
        page.goto(f"{server.base_url}/")
        page.wait_for_url("**/auth/login**")
        page.locator("input[name=username]").fill(server.username)
        page.locator("input[name=password]").fill(server.password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/auth/login" not in url)
        try:
            yield page
        finally:
            browser.close()


def _tab(page, base: str, dag_id: str, run_id: str):
    page.goto(f"{base}/dags/{dag_id}/runs/{run_id}")
    tab = page.get_by_role("link", name="Training run", exact=True)
    tab.wait_for(timeout=120_000)
    tab.click()
    page.wait_for_url("**/plugin/mtc-training-run")
    return page.frame_locator("iframe[title='Training run']")


def test_the_gke_run_view_moves_with_the_leaders_log(page, planted, cluster):
    server, runs = planted
    now = time.time()  # the leader's last minute of lines, one step every 2.276 s (v6e, facts.md)
    for step in range(1101, 1121):
        cluster.write_log(LEADER, maxtext_line(step), at=now - (1121 - step) * 2.276)
    frame = _tab(page, server.base_url, "mtc_gke_shaped", runs["training"])
    step = frame.locator("#step")
    step.filter(has_text="1120").wait_for()
    assert "reported by the leader's log" in frame.locator("#stepsource").inner_text()
    cluster.write_log(LEADER, maxtext_line(1121), at=max(time.time(), now + 2.276))
    written = time.monotonic()
    step.filter(has_text="1121").wait_for(timeout=30_000)
    moved = time.monotonic() - written
    assert moved <= REFRESH_S + 2.0, f"the step moved {moved:.1f}s after the line (one refresh: {REFRESH_S}s)"
    rate = float(frame.locator("#rate").inner_text())
    goodput = frame.locator("#goodput").inner_text().strip()
    assert goodput.endswith("%") and "so far" in frame.locator("#goodputsource").inner_text(), goodput
    assert "700" in frame.locator("#restores").inner_text()
    frame.locator("#chart").wait_for()
    loaded = frame.locator("#chart").evaluate(  # drawn on request: matplotlib's first import is slow under load
        "img => img.complete && img.naturalWidth ? true : new Promise(done => {"
        " img.addEventListener('load', () => done(img.naturalWidth > 0)); img.addEventListener('error', () => done(false));"
        " })")
    assert loaded, "the chart did not load"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "12-run-view-gke.png"), full_page=True)
    print(f"\nsteps/hour shown {rate:.0f}; step moved {moved:.1f}s after the new log line (page refresh 3 s, cluster cache 2 s; machine under load)")


def _loaded(image) -> bool:
    return image.evaluate(  # drawn on request: matplotlib's first import is slow under load
        "img => img.complete && img.naturalWidth ? true : new Promise(done => {"
        " img.addEventListener('load', () => done(img.naturalWidth > 0)); img.addEventListener('error', () => done(false));"
        " })")


def test_a_gke_shaped_day_read_against_its_ledger(page, planted, cluster):
    """Every figure the page shows of a 30-hour GKE-shaped run, from the ledger the launch task pushed: goodput and
    its downtime, restarts (ended attempts' and the live one's), attempts vs tries, tiers, restores, interruptions by
    kind, the chart's span; and the runs list's row."""
    import calendar
    from collections import Counter
    from io import BytesIO

    from PIL import Image

    from mtc_provider.core.attempt.ledger import RunLedger
    from mtc_provider.core.view.run_goodput import goodput_from_ledger
    from tests.core import day_run

    server, runs = planted
    ledger = RunLedger.from_dict(day_run.shifted(day_run.ledger(), runs["by"]))
    attempts = day_run.shifted(day_run.ATTEMPTS, runs["by"])
    now = time.time()
    for step in range(51681, 51701):  # attempt 3's leader after its in-cluster restart, still training
        cluster.write_log(DAY_LEADER, maxtext_line(step), at=now - (51701 - step) * 2.276)
    frame = _tab(page, server.base_url, "mtc_gke_shaped", runs["day"])
    frame.locator("#step").filter(has_text="51700").wait_for()

    expected = goodput_from_ledger(ledger, end=time.time(), begin=attempts[0]["start"])
    shown = float(frame.locator("#goodput").inner_text().rstrip("%")) / 100
    assert shown == pytest.approx(expected["goodput"], abs=0.0006), (shown, expected)
    assert expected["goodput"] == pytest.approx(day_run.EXPECTED_GOODPUT, abs=0.001)  # 95.7 %, not 0.5 %
    assert frame.locator("#goodputsource").inner_text() == "so far, from the run ledger's intervals"
    badput = dict(zip(frame.locator("#badput th").all_inner_texts(), frame.locator("#badput td").all_inner_texts()))
    assert badput["downtime"] == "12m00s" and badput["disruptions"] == str(expected["disruptions"]) == "3"

    restarts = {}
    for start in ledger.starts:
        restarts[start.attempt] = max(restarts.get(start.attempt, 0), start.restart)
    rows = frame.locator("#attempts tr")
    got = [(r.get_attribute("data-attempt"), r.get_attribute("data-try"), r.locator("td").nth(6).inner_text())
           for r in rows.all()]
    assert got == [(str(a["attempt"]), str(a["try"]), str(restarts[a["attempt"]])) for a in attempts], got
    assert got[-1][2] == "1"  # the live attempt's in-cluster restart, before it ends
    live_log = rows.nth(2).get_by_role("link", name="try 2").get_attribute("href")
    assert live_log.endswith("/tasks/train?try_number=2"), live_log

    summary = frame.locator("#interruptions").inner_text()
    words = {"preemption": "graceful preemptions handled in the cluster",
             "preemption-new-attempt": "graceful preemptions that took a new attempt", "host-loss": "host losses"}
    for kind, n in Counter(i.kind for i in ledger.interruptions).items():
        assert f"{words[kind]}: {n}" in summary, summary

    def newest(tier: str) -> str:
        return frame.locator(f"#checkpoints tr[data-tier='{tier}'] td").nth(2).inner_text()

    complete = {t: max(s.step for s in ledger.saves if s.tier == t and s.complete) for t in ("local", "replicator")}
    assert (newest("local"), newest("replicator"), newest("persistent")) == (
        str(complete["local"]), str(complete["replicator"]), "")  # replicator backups are never called persistent
    assert frame.locator("#newest").inner_text() == "none yet"
    restores = [[cell.strip() for cell in r.locator("td").all_inner_texts()[1:]]
                for r in frame.locator("#restores tr").all()]
    assert restores == [[str(s.restored_step), s.restored_tier, f"{s.restore_seconds:.2f} s"]
                        for s in sorted(ledger.starts, key=lambda s: s.at) if s.restored_step is not None], restores

    chart = frame.locator("#chart")
    chart.wait_for()
    assert _loaded(chart), "the chart did not load"
    png = page.request.get(server.base_url + chart.get_attribute("src"))
    assert png.ok, png.status
    drawn = Image.open(BytesIO(png.body())).text["Description"]
    first = min(s.at for s in ledger.starts)
    span = drawn.split("span: ")[1]
    assert span.startswith(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(first))), drawn
    assert abs(calendar.timegm(time.strptime(span.split(" - ")[1], "%Y-%m-%dT%H:%M:%SZ")) - time.time()) < 120, \
        drawn  # the whole run, to now
    assert "restores" in drawn and "graceful preemptions" in drawn and "failures" in drawn and "loss" in drawn
    assert "(30h0" in frame.locator("#timespan").inner_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "14-run-view-gke-day.png"), full_page=True)

    page.goto(f"{server.base_url}/mtc/runs/mtc_gke_shaped/{runs['day']}")  # the page alone, for the docs
    page.locator("#step").filter(has_text="51700").wait_for()
    assert _loaded(page.locator("#chart"))
    page.screenshot(path=str(doc_images() / "run-view-gke.png"), full_page=True)

    page.goto(f"{server.base_url}/mtc/")
    row = page.locator(f"tr[data-run='{runs['day']}']")
    cell = lambda name: row.locator(f"td[data-column='{name}']").inner_text()  # noqa: E731
    assert cell("goodput") == f"{100 * expected['goodput']:.1f}% so far"
    assert cell("interruptions") == str(len(ledger.interruptions))
    assert cell("newest restorable step") == f"{complete['replicator']:,} (MTC replicator backup)"
    assert cell("step").startswith("51,650 / 100,000")  # the progress XCom: the list reads no log lines
    page.screenshot(path=str(ARTIFACTS / "15-runs-list.png"), full_page=True)


def test_an_unrelated_runs_tab_is_silent(page, planted):
    server, runs = planted
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/mtc/api/" in r.url else None)
    frame = _tab(page, server.base_url, "mtc_unrelated", runs["unrelated"])
    frame.get_by_test_id("not-a-training-run").wait_for()
    page.wait_for_timeout(8_000)  # more than two refreshes of a live page
    assert asked == [], asked
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "13-unrelated-run-tab.png"))
