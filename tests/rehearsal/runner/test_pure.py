"""The runner's pure parts: manifest reading, JobSet failure policy, fault plans."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtc_provider.core.basics.errors import SpecError
from mtc_local.runner import policy
from mtc_local.runner.faults import last_step, parse_plan
from mtc_local.runner.manifest import expand_vars, parse, pod_spec, rewrite_mount
from tests.support.local_cluster import make_jobset


def test_rewrite_mount_only_replaces_the_path_prefix():
    host = Path("/dev/shm/mtc-x/ns/js/s0-h1")
    assert rewrite_mount("local_checkpoint_directory=/local", "/local", host) == f"local_checkpoint_directory={host}"
    assert rewrite_mount("--info-file=/local/jax-init-info.txt", "/local", host) == f"--info-file={host}/jax-init-info.txt"
    assert rewrite_mount("/localdata /usr/local /local.d", "/local", host) == "/localdata /usr/local /local.d"
    assert rewrite_mount("cd /local && ls", "/local", host) == f"cd {host} && ls"


def test_expand_vars_follows_kubernetes_rules():
    env = {"POD": "p-0"}
    assert expand_vars("--done=/control/$(POD)", env) == "--done=/control/p-0"
    assert expand_vars("$$(POD) $(MISSING)", env) == "$(POD) $(MISSING)"


def test_pod_spec_sets_jobset_env_and_runs_the_runner_python(tmp_path):
    plan = parse("default", make_jobset("js", tmp_path / "w.py", slices=2, hosts=2))
    rj, job_index, slice_index = plan.slices()[1]
    spec = pod_spec(plan, rj, job_index, slice_index, 1, "127.0.0.1:1234", tmp_path / "rd", 0, base_env={})
    assert spec.argv[0] == sys.executable
    assert spec.argv[2] == f"dir={tmp_path / 'rd'}"
    assert spec.process_id == 3
    assert {k: spec.env[k] for k in ("JOBSET_NAME", "JOB_INDEX", "JOB_COMPLETION_INDEX", "MTC_NUM_SLICES",
                                     "MTC_HOSTS_PER_SLICE", "MTC_PROCESS_ID", "MY_DIR")} == {
        "JOBSET_NAME": "js", "JOB_INDEX": "1", "JOB_COMPLETION_INDEX": "1", "MTC_NUM_SLICES": "2",
        "MTC_HOSTS_PER_SLICE": "2", "MTC_PROCESS_ID": "3", "MY_DIR": f"{tmp_path / 'rd'}/sub"}


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["metadata"].update(name="Bad_Name"), "metadata.name"),
        (lambda b: b["spec"].update(replicatedJobs=[]), "spec.replicatedJobs"),
        (lambda b: b["spec"]["replicatedJobs"][0].update(replicas=0), "spec.replicatedJobs[0].replicas"),
        (lambda b: b["spec"]["failurePolicy"]["rules"][0].update(action="Explode"),
         "spec.failurePolicy.rules[0].action"),
        (lambda b: b["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0].pop(
            "command") and
         b["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0].pop("args"),
         "spec.replicatedJobs[0].template.spec.template.spec.containers[0].command"),
    ],
)
def test_parse_names_the_bad_field(mutate, field):
    body = make_jobset("js", Path("w.py"))
    mutate(body)
    with pytest.raises(SpecError) as err:
        parse("default", body)
    assert err.value.field == field


def _rj(tmp_path):
    return parse("default", make_jobset("js", tmp_path / "w.py")).replicated_jobs[0]


def test_pod_failure_policy_exit_codes(tmp_path):
    rj = _rj(tmp_path)
    assert policy.pod_failure(rj, 3, 0) == ("fail", "PodFailurePolicy")
    assert policy.pod_failure(rj, 42, 0) == ("fail", "BackoffLimitExceeded")  # backoffLimit 0
    assert policy.pod_failure(rj, 137, 0) == ("fail", "BackoffLimitExceeded")
    assert policy.exit_code(-9) == 137 and policy.exit_code(3) == 3


def test_jobset_failure_policy_matches_the_controller(tmp_path):
    body = make_jobset("js", tmp_path / "w.py", max_restarts=2)
    plan = parse("default", body)
    bug = [("js-slice-1", "slice", "PodFailurePolicy")]
    retry = [("js-slice-0", "slice", "BackoffLimitExceeded")]
    assert policy.jobset_failure(plan, bug, 0).reason == "FailJobSetFailurePolicyAction"
    assert policy.jobset_failure(plan, retry, 1).action == "restart"
    failed = policy.jobset_failure(plan, retry, 2)
    assert (failed.action, failed.reason) == ("fail", "ReachedMaxRestarts")
    assert "first failed job: js-slice-0" in failed.message
    no_policy = parse("default", make_jobset("js", tmp_path / "w.py", max_restarts=None))
    assert policy.jobset_failure(no_policy, retry, 0).reason == "FailedJobs"


def test_fault_plan_is_seeded_and_validated():
    plan = {"seed": 7, "faults": [{"kind": "sigkill_host", "at_step": 3}, {"kind": "hang", "at_seconds": 2}]}
    first, second = parse_plan(plan, 4, 2), parse_plan(plan, 4, 2)
    assert first == second and first[0].host is not None and first[1].host is None
    assert {f.slice for seed in range(20) for f in parse_plan({**plan, "seed": seed}, 4, 2)} == {0, 1, 2, 3}
    with pytest.raises(SpecError, match="kind"):
        parse_plan([{"kind": "meteor", "at_step": 1}], 2, 1)
    with pytest.raises(SpecError, match="exactly one of at_step, at_seconds"):
        parse_plan([{"kind": "hang", "at_step": 1, "at_seconds": 2}], 2, 1)
    with pytest.raises(SpecError, match=r"\.slice"):
        parse_plan([{"kind": "hang", "at_step": 1, "slice": 2}], 2, 1)


def test_last_step_reads_the_highest_completed_step():
    assert last_step(b"completed step: 3, loss 1\ncompleted step: 4, loss 0.9\n", None) == 4
    assert last_step(b"nothing\n", 2) == 2


def test_pod_spec_resolves_downward_api_references_of_a_built_jobset(tmp_path):
    """build_jobset reads JobSet's identity through fieldRefs to pod annotations; the runner resolves them."""
    from mtc_provider.core.definition.render.jobset_manifest import build_jobset_for_run
    from mtc_provider.core.definition.description.run import parse_run
    import yaml

    # parse_run, as `mtc` reads the file: examples/local.yaml leaves the output folder to the local home
    config = parse_run(yaml.safe_load((Path(__file__).parents[3] / "examples" / "local.yaml").read_text()),
                       str(tmp_path / "home"))
    body = build_jobset_for_run(config)
    plan = parse("default", body)
    rj, job_index, slice_index = plan.slices()[1]
    spec = pod_spec(plan, rj, job_index, slice_index, 0, "127.0.0.1:1", tmp_path / "rd", 2, base_env={})
    assert spec.env["JOBSET_NAME"] == body["metadata"]["name"]
    assert spec.env["REPLICATED_JOB_NAME"] == rj.name
    assert spec.env["JOB_INDEX"] == str(job_index) == "1"
    assert spec.env["JOBSET_RESTART_ATTEMPT"] == "2"


@pytest.mark.parametrize("code, conditions, decision", [
    # stopped by SIGTERM below its last step under the wrapper (core.definition.render.graceful_exit), on a pod a graceful
    # node shutdown marked DisruptionTarget: rule 0 fails the Job, RestartOnDisruption restarts, not counted
    (143, ("DisruptionTarget",), ("restart", False)),
    # the same exit without the condition (a pod deleted by hand): no pod rule, BackoffLimitExceeded, counted
    (143, (), ("restart", True)),
    (2, (), ("fail", True)),  # a bug's code fails the JobSet at once
])
def test_the_rendered_policy_restarts_a_graceful_preemption_in_the_cluster(tmp_path, code, conditions, decision):
    """The provider's rendered JobSet (graceful_preemption in_cluster) through the runner's policy, which follows the
    Job controller (podFailurePolicy, first matching rule, its message) and JobSet's executeFailurePolicy."""
    from mtc_provider.core.definition.render.jobset_manifest import build_jobset
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
    from mtc_provider.core.definition.shape.tpu import SliceSpec

    body = build_jobset(SliceSpec("v6e", "2x2", 2),
                        CheckpointingSpec(run_name="g", base_output_directory=str(tmp_path), steps=20),
                        WorkloadSpec(jobset_name="g", max_restarts=1, graceful_preemption="in_cluster"))
    plan = parse("default", body)
    rj = plan.replicated_jobs[0]
    assert rj.command[:2] == ("python3", "-c")
    outcome, reason, message = policy.job_failure(rj, code, 0, conditions, "default/g-slice-1-0-x")
    assert outcome == "fail"
    made = policy.jobset_failure(plan, [("g-slice-1", rj.name, reason, message)], 0)
    assert (made.action, made.counts_toward_max) == decision, (reason, message, made)
