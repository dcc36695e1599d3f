"""The rendered JobSet's failure policy (core.definition.render.jobset_manifest) against both supported JobSet CRDs, and against what the
controllers do with it.

- Kubernetes (kubernetes.io "Handling retriable and non-retriable pod failures with Pod failure policy", and
  pkg/controller/job/pod_failure_policy.go): the first matching podFailurePolicy rule wins; a FailJob rule fails the
  Job with reason PodFailurePolicy and a message naming the rule's index ("Pod NS/NAME has condition
  DisruptionTarget matching FailJob rule at index 0"). A pod Kubernetes disrupts (preemption, eviction, node loss,
  graceful node shutdown) gets the DisruptionTarget condition (kubernetes.io "Disruptions", pod disruption
  conditions). podFailurePolicy needs the pod template's restartPolicy Never.
- JobSet (CRD `failurePolicy.rules`, v0.10.1 and v0.12.0: rules in order, first match wins, a rule matches the
  Job's failure reason AND message; docs "Failure Policy", example host-maintenance-event-model): a disruption
  restarts every slice without counting (RestartJobSetAndIgnoreMaxRestarts); a bug exit code fails the JobSet.
- xpk v1.13's rendered MTC JobSet (shared/reference/xpk-v1.13-mtc-jobset-rendered.yaml) has the bug rule only
  (FailJobSet on PodFailurePolicy, `onPodConditions: []`): a disruption there counts against maxRestarts.
"""

from __future__ import annotations

import re

import pytest

from mtc_local.runner import policy
from mtc_local.runner.manifest import parse
from mtc_provider.core.definition.render.jobset_manifest import DISRUPTION_MESSAGE_PATTERN, build_jobset
from tests.core.core_helpers import checkpointing, slices, workload

CRDS = ("jobset-crd-v0.10.1.yaml", "jobset-crd-v0.12.0.yaml")


def _jobset() -> dict:
    return build_jobset(slices(), checkpointing(), workload(max_restarts=3))


@pytest.mark.parametrize("crd", CRDS)
def test_the_disruption_rules_validate_against_both_jobset_crds(crd, jobset_validators):
    jobset = _jobset()
    jobset_validators[crd].validate(jobset)  # raises ValidationError naming the path
    # v0.10.1 requires `status` in an onPodConditions pattern: a pattern without it is refused there
    broken = _jobset()
    broken["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] = [
        {"type": "DisruptionTarget"}]
    if crd == "jobset-crd-v0.10.1.yaml":
        with pytest.raises(Exception, match="status"):
            jobset_validators[crd].validate(broken)
    rules = jobset["spec"]["failurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["RestartJobSetAndIgnoreMaxRestarts", "FailJobSet"]
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_the_message_pattern_matches_the_job_controller_s_message_for_a_disruption_only():
    disruption = "Pod default/train-slice-0-0-abcde has condition DisruptionTarget matching FailJob rule at index 0"
    bug = "Container jax-tpu for pod default/train-slice-0-0-abcde failed with exit code 1 matching FailJob rule at index 1"
    assert re.search(DISRUPTION_MESSAGE_PATTERN, disruption) and not re.search(DISRUPTION_MESSAGE_PATTERN, bug)


def _plan():
    return parse("default", _jobset())


@pytest.mark.parametrize(("code", "conditions", "action", "reason", "counted"), [
    (143, ("DisruptionTarget",), "restart", "", False),  # preempted, exited on SIGTERM: restart, not counted
    (137, ("DisruptionTarget",), "restart", "", False),  # SIGKILL after the grace period of a disruption
    (1, ("DisruptionTarget",), "restart", "", False),  # a disrupted pod's exit code is never a bug
    (1, (), "fail", "FailJobSetFailurePolicyAction", True),  # a bug fails the JobSet at once
    (137, (), "restart", "", True),  # a crash with a retryable code: counted against maxRestarts
])
def test_the_local_runner_applies_the_rules_as_the_controllers_do(code, conditions, action, reason, counted):
    plan = _plan()
    rj = plan.replicated_jobs[0]
    outcome, job_reason, message = policy.job_failure(rj, code, 0, conditions, "default/p", "jax-tpu")
    assert outcome == "fail"
    decision = policy.jobset_failure(plan, [("js-slice-0", rj.name, job_reason, message)], 0)
    assert (decision.action, decision.reason, decision.counts_toward_max) == (action, reason, counted)
    if conditions:
        assert message == "Pod default/p has condition DisruptionTarget matching FailJob rule at index 0"


def test_disruptions_restart_past_max_restarts_while_crashes_stop_there():
    plan = _plan()
    rj = plan.replicated_jobs[0]
    disrupted = [("js-slice-0", rj.name, *policy.job_failure(rj, 143, 0, ("DisruptionTarget",), "default/p")[1:])]
    crashed = [("js-slice-0", rj.name, *policy.job_failure(rj, 137, 0, (), "default/p")[1:])]
    assert policy.jobset_failure(plan, disrupted, 50).action == "restart"  # maxRestarts 3, 50 counted so far
    assert policy.jobset_failure(plan, crashed, 3).reason == "ReachedMaxRestarts"
