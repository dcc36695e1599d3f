"""The "JobSet pod logs" link: the attempt's leader pod, over the attempt's time range (issue 27).

Logs Explorer URL form: https://console.cloud.google.com/logs/query;query=<filter>;timeRange=<start>/<end>?project=<id>,
the filter and the ISO 8601 interval percent-encoded (Google's Logs Explorer URL parameters; the same form as
pkg.go.dev/github.com/vvakame/gcplogurl@v0.3.0's example output). JobSet names a replicated job's Jobs
`<jobset>-<replicatedJob>-<jobIndex>` and their pods carry jobset.sigs.k8s.io/job-index and
batch.kubernetes.io/job-completion-index (the JobSet CRD v0.12.0 in rehearsal/mtc_local/cluster/crds, and
https://kubernetes.io/docs/reference/labels-annotations-taints/#batch-kubernetes-io-job-completion-index); Cloud
Logging shows pod labels under labels."k8s-pod/<key with '.' as '_'>".
"""

from __future__ import annotations

import time
from datetime import datetime
from urllib.parse import unquote

import pytest

from mtc_provider import targets
from mtc_provider.links.jobset import JOBSET_LINKS, JobSetLogsLink, logs_url
from mtc_provider.operators.jobset import MtcJobSetOperator
from tests.doubles.memory_jobset import AsyncMemoryJobSetApi, MemoryJobSetApi, MemoryJobSetCluster

from tests.support.js_helpers import FakeTI


def _parts(url: str) -> tuple[str, str | None, str]:
    """(filter, timeRange or None, project) of a Logs Explorer URL."""
    head, project = url.split("?project=")
    params = dict(p.split("=", 1) for p in head.split(";")[1:])
    return unquote(params["query"]), unquote(params["timeRange"]) if "timeRange" in params else None, project


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_logs_link_is_the_leader_pod_over_the_attempts_time_range():
    url = logs_url("proj", "tpu", "ml", "train-ab12c-a2", start=1_780_000_000, end=1_780_003_600,
                   replicated_job="slice")
    query, time_range, project = _parts(url)
    assert project == "proj"
    assert query.splitlines() == [
        'resource.type="k8s_container"', 'resource.labels.cluster_name="tpu"', 'resource.labels.namespace_name="ml"',
        'labels."k8s-pod/jobset_sigs_k8s_io/jobset-name"="train-ab12c-a2"',
        'labels."k8s-pod/jobset_sigs_k8s_io/replicatedjob-name"="slice"',
        'labels."k8s-pod/jobset_sigs_k8s_io/job-index"="0"',
        'labels."k8s-pod/batch_kubernetes_io/job-completion-index"="0"',
    ]
    start, end = time_range.split("/")
    assert _epoch(start) == 1_780_000_000 - 60 and _epoch(end) == 1_780_003_600 + 300  # margins for skew, shutdown
    assert ";" not in unquote(url.split(";query=")[1].split(";timeRange=")[0])  # the filter cannot end the segment


@pytest.fixture
def gke_cluster():
    cluster = MemoryJobSetCluster()  # plays: running, completed
    with targets.registered_jobset_api("gke", lambda c: MemoryJobSetApi(cluster), lambda c: AsyncMemoryJobSetApi(cluster)):
        yield cluster


def test_logs_link_of_an_attempt_spans_its_start_to_its_end_through_the_real_link_class(gke_cluster, monkeypatch):
    from airflow.sdk.execution_time.xcom import XCom

    ti = FakeTI()
    op = MtcJobSetOperator(
        task_id="train", slices={"tpu_type": "v6e", "topology": "2x4", "num_slices": 2},
        checkpointing={"run_name": "llama", "base_output_directory": "gs://ckpt/out", "steps": 100},
        workload={"jobset_name": "train", "image": "gcr.io/p/maxtext:1", "replicated_job_name": "workers"},
        project_id="proj", location="us-east5", cluster_name="tpu", wait_for="completion", deferrable=False,
        poll_interval=0)
    before = time.time()
    op.execute({"ti": ti, "run_id": ti.run_id})
    after = time.time()
    # Airflow 3 shows a link from the XCom under its xcom_key (BaseOperatorLink.xcom_key; XCom.get_value reads
    # XCom.get_one for the task instance's key): served here from what the operator pushed.
    monkeypatch.setattr(XCom, "get_one", classmethod(lambda cls, key, **ids: ti.xcoms.get(key)))
    # The links read a non-mapped task's value with XCom.get_all (links.stored_value: no "XCom not found" error
    # logged for a link the task never set): the same values, as a list.
    monkeypatch.setattr(XCom, "get_all", classmethod(lambda cls, key, **ids: [ti.xcoms[key]] if key in ti.xcoms
                                                     else None))
    link = next(link for link in JOBSET_LINKS if isinstance(link, JobSetLogsLink))
    url = link.get_link(op, ti_key=type("Key", (), {"dag_id": "dag", "task_id": "train", "run_id": ti.run_id,
                                                    "map_index": -1})())
    query, time_range, project = _parts(url)
    name = gke_cluster.created[0]
    assert project == "proj" and f'jobset-name"="{name}"' in query and 'replicatedjob-name"="workers"' in query
    start, end = (_epoch(t) for t in time_range.split("/"))
    # The range is this attempt's (whole seconds): from its start (less the margin) to its end (plus the margin),
    # not the day-long range a running attempt's link has.
    assert int(before) - 61 <= start <= after - 60
    assert int(before) + 299 <= end <= after + 301
