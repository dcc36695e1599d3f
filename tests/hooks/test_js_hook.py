"""MtcJobSetHook for @task code: submit, find by run, status, newest step; in memory and over real HTTP."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.js_helpers import finalize
from tests.doubles.memory_jobset import status_failed, status_running
from mtc_provider.core.basics.errors import SpecError
from mtc_provider.hooks.jobset import MtcJobSetHook

SLICES = {"tpu_type": "v6e", "topology": "2x2", "num_slices": 2}


def specs(tmp_path, run_name: str = "llama", jobset_name: str = "llama-a1") -> tuple[dict, dict, dict]:
    checkpointing = {"run_name": run_name, "base_output_directory": str(tmp_path / "out"), "steps": 100}
    return SLICES, checkpointing, {"jobset_name": jobset_name}


def test_submit_find_status_and_newest_step(tmp_path, cluster) -> None:
    cluster.plan([status_failed()], [status_running()])
    hook = MtcJobSetHook()
    hook.submit(*specs(tmp_path, jobset_name="llama-a1"), attempt=1)
    hook.submit(*specs(tmp_path, jobset_name="llama-a2"), attempt=2, customization={"queue_name": "q"})
    hook.submit(*specs(tmp_path, run_name="other", jobset_name="other-a1"), attempt=1)
    cluster.advance("default", "llama-a1")
    cluster.advance("default", "llama-a2")
    finalize(str(tmp_path / "out" / "llama" / "checkpoints"), 40)

    found = hook.find_by_run("llama")
    assert [(a.name, a.attempt, a.phase) for a in found] == [("llama-a1", 1, "failed"), ("llama-a2", 2, "running")]
    assert found[0].checkpoint_dir == str(tmp_path / "out" / "llama" / "checkpoints")
    assert hook.status("llama-a2").phase == "running"
    assert hook.newest_step(found[-1].checkpoint_dir) == 40
    summary = hook.run_status("llama")
    assert summary["newest_step"] == 40 and [a["attempt"] for a in summary["attempts"]] == [1, 2]
    assert json.loads(json.dumps(summary)) == summary  # returnable from a @task (XCom)
    assert cluster.objects[("default", "llama-a2")]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"


def test_submit_refuses_a_bad_spec_before_creating_anything(tmp_path, cluster) -> None:
    slices, checkpointing, workload = specs(tmp_path)
    with pytest.raises(SpecError, match="customization.capacity"):
        MtcJobSetHook().submit(slices, checkpointing, workload, customization={"capacity": "cheap"})
    assert cluster.created == []


def test_delete_keeps_checkpoints(tmp_path, cluster) -> None:
    hook = MtcJobSetHook()
    hook.submit(*specs(tmp_path))
    finalize(str(tmp_path / "out" / "llama" / "checkpoints"), 10)
    hook.delete("llama-a1")
    assert cluster.deleted == ["llama-a1"]
    assert hook.newest_step(str(tmp_path / "out" / "llama" / "checkpoints")) == 10


def kubeconfig(tmp_path, server) -> str:
    """A kubeconfig for the fake API server (what `gcloud container clusters get-credentials` writes, with a
    static token instead of the gcloud auth plugin)."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
        "users": [{"name": "u", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": "default"}}],
    }))
    return str(path)


def test_over_http_with_a_kubeconfig(tmp_path, apiserver, fast_retries) -> None:
    hook = MtcJobSetHook(kubeconfig=kubeconfig(tmp_path, apiserver))
    created = hook.submit(*specs(tmp_path), attempt=1)
    assert created["metadata"]["name"] == "llama-a1"
    assert [a.name for a in hook.find_by_run("llama")] == ["llama-a1"]
    assert hook.status("llama-a1").phase == "pending"
    assert apiserver.requests[0].auth == "Bearer t0k3n"
