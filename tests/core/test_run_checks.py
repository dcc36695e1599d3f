"""Issue #24: the run description's checks, in the pure core (core.definition.shape.tpu, core.definition.description.jobset_names, core.definition.description.run_checks).

Sources: GKE "Plan TPUs in GKE" (topology tables), GKE "Deploy TPU Multislices in GKE" (multi-host only),
kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go@v0.10.1 and @v0.12.0 (derived Job and pod names).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from core_helpers import gke_config, local_config

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.definition.description.jobset_names import attempt_name, check_jobset_names
from mtc_provider.core.definition.description.params import training_run
from mtc_provider.core.definition.description.plan import PROJECT_ID_PLACEHOLDER, build_plan
from mtc_provider.core.definition.description.run_checks import check_run
from mtc_provider.core.definition.description.spec import RunConfig, SizingSpec
from mtc_provider.core.definition.shape.tpu import MULTISLICE_RULE, TPU_TYPES, SliceSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# --- item 2: one table per TPU type -------------------------------------------------------------------------
@pytest.mark.parametrize("tpu_type", sorted(TPU_TYPES))
def test_every_table_row_is_a_slice_with_the_tables_hosts(tpu_type) -> None:
    kind = TPU_TYPES[tpu_type]
    for shape in kind.shapes:
        spec = SliceSpec(tpu_type, shape.topology, 2, shape.machine_type)
        assert spec.hosts_per_slice == shape.hosts
        assert shape.chips == spec.chips_per_slice == max(shape.hosts * spec.chips_per_host, spec.chips_per_host)


@pytest.mark.parametrize(
    "tpu_type, topology",
    [("v6e", "2x6"), ("v6e", "16x32"), ("v5p", "2x2x3"), ("v5e", "4x2"), ("v5p", "8x4x4"), ("v5p", "16x16x28"),
     ("v4", "16x16x20"), ("v4", "4x4x6")],
)
def test_topologies_gke_does_not_offer_are_refused_with_the_table(tpu_type, topology) -> None:
    with pytest.raises(SpecError) as caught:
        SliceSpec(tpu_type, topology, 2)
    assert caught.value.field == "slices.topology" and caught.value.value == topology
    assert f"a topology GKE offers for {tpu_type}: " in caught.value.allowed
    first = TPU_TYPES[tpu_type].shapes[0]
    assert f"{first.topology} ({first.machine_type}, 1 host)" in caught.value.allowed  # the table is listed


@pytest.mark.parametrize(
    "tpu_type, topology, hosts",
    [("v5p", "16x16x24", 1536), ("v5p", "4x4x8", 32), ("v4", "16x16x16", 1024), ("v4", "8x8x12", 192),
     ("v6e", "16x16", 64), ("v5e", "2x4", 2)],
)
def test_the_largest_and_the_cube_topologies_are_offered(tpu_type, topology, hosts) -> None:
    assert SliceSpec(tpu_type, topology, 2).hosts_per_slice == hosts


def test_the_machine_type_defaults_to_the_only_one_of_the_topology() -> None:
    assert SliceSpec("v6e", "1x1", 2).machine_type == "ct6e-standard-1t"
    assert SliceSpec("v6e", "2x4", 2).machine_type == "ct6e-standard-4t"  # two offered: the multi-host one


# --- item 1: Multislice needs multi-host slices on gke ----------------------------------------------------------
@pytest.mark.parametrize(
    "tpu_type, topology, machine_type",
    # GKE's own examples of single-host node pools, and the training DAG's former default (v6e 2x2).
    [("v4", "2x2x1", "ct4p-hightpu-4t"), ("v5e", "2x2", "ct5lp-hightpu-4t"), ("v6e", "2x2", ""),
     ("v6e", "2x4", "ct6e-standard-8t"), ("v5p", "2x2x1", "")],
)
def test_gke_refuses_single_host_multislice_with_gkes_sentence(tpu_type, topology, machine_type) -> None:
    config = gke_config(slices={"tpu_type": tpu_type, "topology": topology, "machine_type": machine_type or None})
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(config)
    assert caught.value.field == "slices.topology" and caught.value.value == topology
    assert MULTISLICE_RULE in caught.value.allowed and "the smallest is " in caught.value.allowed
    assert "1 host)" not in caught.value.allowed  # only multi-host shapes are offered


def test_local_target_keeps_single_host_slices_for_speed() -> None:
    config = RunConfig.from_dict(local_config(slices={"topology": "2x2"}, sizing={"parameters": "1e6"}))
    assert config.slices.hosts_per_slice == 1


def test_training_form_default_topology_is_the_smallest_the_target_takes() -> None:
    from tests.core.core_helpers import form

    assert training_run(form("local"), "/unused")["slices"]["topology"] == "2x2"
    gke = training_run(form("gke"), "/unused")
    assert (gke["slices"]["topology"], gke["slices"]["machine_type"]) == ("2x4", "ct6e-standard-4t")
    v5p = training_run(form("gke", slices={"tpu_type": "v5p"}), "/unused")
    assert v5p["slices"]["topology"] == "2x2x2"


# --- item 3: names JobSet's webhook refuses ---------------------------------------------------------------------
def webhook_refuses(jobset: str, rjob: str, replicas: int, completions: int) -> bool:
    """jobset_webhook.go's rule, written again from the source: GenJobName(js, rjob, replicas-1) and
    GenPodName(js, rjob, replicas-1, completions-1) + "-abcde" must be DNS-1035 labels (<= 63, [a-z] first)."""
    label = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    names = (f"{jobset}-{rjob}-{replicas - 1}", f"{jobset}-{rjob}-{replicas - 1}-{completions - 1}-abcde")
    return any(len(name) > 63 or not label.match(name) for name in names)


def test_jobset_name_starting_with_a_digit_is_refused() -> None:
    assert webhook_refuses("1run", "slice", 2, 8)
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(gke_config(workload={"jobset_name": "1run"}))
    assert caught.value.field == "workload.jobset_name" and "lower-case letter" in caught.value.allowed


def test_pod_names_over_63_characters_are_refused_for_40_chars_15_char_job_32_hosts() -> None:
    # The case: a 40-character name, a 15-character replicated job, 32 hosts (v6e 8x16).
    assert webhook_refuses("a" * 40, "b" * 15, 2, 32)
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(gke_config(slices={"topology": "8x16"},
                                       workload={"jobset_name": "a" * 40, "replicated_job_name": "b" * 15}))
    assert caught.value.field == "workload.jobset_name" and "at most 25 characters" in caught.value.allowed


@pytest.mark.parametrize("rjob, replicas, hosts", [("b" * 15, 2, 32), ("slice", 2, 64), ("b" * 15, 12, 256),
                                                   ("rj", 1000, 1000)])
def test_the_limit_is_the_webhooks_boundary_for_every_attempt_name(rjob, replicas, hosts) -> None:
    """At the limit every attempt name (tries 1..999, cut to 40) is admitted; one more character and try 999
    is refused: the check is exactly the webhook's rule on the names the operator submits."""
    try:
        check_jobset_names("a" * 40, rjob, replicas, hosts)
        limit = 40
    except SpecError as exc:
        limit = int(re.search(r"at most (\d+) characters", exc.allowed).group(1))
    for try_number in (1, 9, 99, 999):
        submitted = attempt_name("a" * limit, "dag", "run", "train", try_number)
        assert not webhook_refuses(submitted, rjob, replicas, hosts)
    if limit < 40:
        assert webhook_refuses(attempt_name("a" * (limit + 1), "dag", "run", "train", 999), rjob, replicas, hosts)
        with pytest.raises(SpecError):
            check_jobset_names("a" * (limit + 1), rjob, replicas, hosts)


def test_a_replicated_job_name_that_leaves_no_room_is_named_in_the_error() -> None:
    with pytest.raises(SpecError) as caught:
        check_jobset_names("a", "b" * 40, 2, 1000)
    assert caught.value.field == "workload.replicated_job_name" and "shorter" in caught.value.allowed


def test_run_name_starting_with_a_digit_is_refused_through_the_form() -> None:
    from tests.core.core_helpers import form

    with pytest.raises(SpecError) as caught:
        training_run(form("local", run_name="1run", steps=10), "/unused")
    assert caught.value.field == "checkpointing.run_name"


# --- item 6: one validation: the same refusal, whoever asks -----------------------------------------------------
def test_check_run_is_the_plans_and_the_forms_sizing_refusal() -> None:
    slices = SliceSpec("v6e", "4x8", 2)

    with pytest.raises(SpecError) as direct:
        check_run("gke", slices, sizing=SizingSpec(parameters=1e30))
    with pytest.raises(SpecError) as planned:
        RunConfig.from_dict(gke_config(sizing={"parameters": "1e30"}))
    assert (direct.value.field, direct.value.allowed) == (planned.value.field, planned.value.allowed)


# --- item 9: mtc plan for a kubernetes target -------------------------------------------------------------------
def test_mtc_plan_describes_a_kubernetes_target_run() -> None:
    plan = build_plan(RunConfig.from_dict(yaml.safe_load((EXAMPLES / "kubernetes.yaml").read_text())))
    assert plan.target == "kubernetes"
    assert [step.name for step in plan.checks] == ["jobset-api", "checkpoint-configuration-api"]
    assert [step.name for step in plan.creates] == ["bucket", "checkpoint-configuration", "jobset"]
    assert [m["kind"] for m in plan.manifests] == ["CheckpointConfiguration", "JobSet"]
    skipped = plan.lines()["not applicable on the kubernetes target"]
    assert any(line.startswith("tpu-node-pools:") for line in skipped)


def test_kubernetes_run_without_a_cluster_section_shows_the_project_placeholder() -> None:
    data = gke_config()
    data["target"] = "kubernetes"
    data.pop("cluster")
    plan = build_plan(RunConfig.from_dict(data))
    assert all(f"{PROJECT_ID_PLACEHOLDER}.svc.id.goog" in member for member in plan.members)


def test_kubernetes_run_needs_a_bucket_and_an_image() -> None:
    data = gke_config()
    data["target"] = "kubernetes"
    data.pop("bucket")
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(data)
    assert caught.value.field == "bucket"
    data = gke_config(workload={"image": "local"})
    data["target"] = "kubernetes"
    with pytest.raises(SpecError) as caught:
        RunConfig.from_dict(data)
    assert caught.value.field == "workload.image" and "kubernetes target" in caught.value.allowed


# --- issue 33 item 14: emergency checkpointing's replicas (Orbax) and Spot's grace period (GKE) ----------------------

def test_emergency_checkpointing_keeps_two_replicas_when_the_flags_leave_them() -> None:
    """Orbax's emergency CheckpointManager needs >= 2 data-parallel replicas; MaxText's dcn_data_parallelism -1
    (its default) takes the slices the other dcn axes leave. Without the local tier any split is MaxText's affair."""
    from core_helpers import run_config

    from mtc_provider.core.definition.description.run_checks import data_parallel_replicas

    assert data_parallel_replicas(4, {}) == 4
    assert data_parallel_replicas(4, {"dcn_fsdp_parallelism": 2}) == 2
    assert data_parallel_replicas(2, {"dcn_data_parallelism": 1}) == 1
    assert data_parallel_replicas(2, {"ici_data_parallelism": 2, "dcn_data_parallelism": 1}) is None  # can't tell
    run_config(workload={"extra_flags": {"dcn_data_parallelism": 2}})  # two replicas: accepted
    run_config(workload={"extra_flags": {"dcn_data_parallelism": 1, "dcn_fsdp_parallelism": 2}},
               checkpointing={"enable_emergency_checkpoint": False, "local_checkpoint_period": 0})


def test_spot_capacity_warns_about_a_grace_period_gke_cannot_give() -> None:
    """GKE Spot VMs: the VM stops 30 s after the preemption notice and the pods get at most 15 s of it (graceful
    node shutdown): a longer termination grace period is a warning in `mtc plan` and the plan task, not an error."""
    from core_helpers import gke_config

    from mtc_provider.core.definition.description.run import parse_run, run_plan

    def warnings(**sections):
        return run_plan(parse_run(gke_config(**sections)), "/tmp/mtc-home")["warnings"]

    spot = warnings(customization={"capacity": "spot"}, workload={"termination_grace_period_seconds": 300})
    assert any("termination_grace_period_seconds is 300 s" in w and "at most 15 s" in w for w in spot), spot
    quick = warnings(customization={"capacity": "spot"}, workload={"termination_grace_period_seconds": 15})
    assert not any("Spot" in w for w in quick)
    assert not any("Spot" in w for w in warnings(workload={"termination_grace_period_seconds": 300}))  # on-demand
