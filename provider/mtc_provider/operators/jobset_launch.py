"""The launch of an attempt, as plain functions the launch operator (operators.jobset) calls: its JobSet rendered
once per try, the submission, the trigger, the newest restorable step."""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, Mapping

from airflow.sdk.exceptions import AirflowFailException

from mtc_provider.adapters.kubernetes import Forbidden
from mtc_provider.adapters.protocols import ApiError, CheckpointStore
from mtc_provider.adapters.retry import ApiUnreachable
from mtc_provider.core.attempt.jobset_events import ERROR, JobSetEvent
from mtc_provider.core.attempt.next_in_try import NEXT_ATTEMPT, renumbered
from mtc_provider.core.attempt.resubmission import FAIL, decide_rejected
from mtc_provider.core.attempt.status import evaluate_jobset
from mtc_provider.core.basics import labels as L
from mtc_provider.core.definition.description.jobset_names import attempt_name
from mtc_provider.operators.jobset_failures import JobSetAttemptFailed

if TYPE_CHECKING:  # the spec and the trigger are imported where they run: DAG files stay light
    from mtc_provider.core.definition.render.customization import CustomizationSpec
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec
    from mtc_provider.core.definition.shape.tpu import SliceSpec
    from mtc_provider.triggers.jobset import JobSetTrigger


def sections(given: tuple[Any, Any, Any, Any], kind: str) -> tuple[SliceSpec, CheckpointingSpec, WorkloadSpec,
                                                                  CustomizationSpec]:
    """The run description's sections (spec objects or dicts) validated, and checked across sections as `mtc plan`
    checks them (GKE's Multislice rule, the names JobSet's webhook derives). SpecError names the field."""
    from mtc_provider.core.definition.render.customization import CustomizationSpec
    # imported where it runs: DAG files stay light
    from mtc_provider.core.definition.description.run_checks import check_run
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, WorkloadSpec, spec_from_dict
    from mtc_provider.core.definition.shape.tpu import SliceSpec

    slices, checkpointing, workload, customization = (
        spec_from_dict(kind_of, name, value) for kind_of, name, value in zip(
            (SliceSpec, CheckpointingSpec, WorkloadSpec, CustomizationSpec),
            ("slices", "checkpointing", "workload", "customization"), given))
    check_run(kind, slices, workload=workload, customization=customization)
    return slices, checkpointing, workload, customization


def attempt_body(slices: SliceSpec, checkpointing: CheckpointingSpec, workload: WorkloadSpec,
                 customization: CustomizationSpec, ti: Any | None,
                 attempt: int | None = None) -> tuple[str, dict[str, Any]]:
    """The try's JobSet, rendered once per try before any side effect (a refusal costs nothing); each attempt is
    renumbered from it (core.attempt.next_in_try). Without a task instance, the run's own name."""
    from mtc_provider.core.definition.render.jobset_manifest import build_jobset

    if ti is None:
        name, labels = workload.jobset_name, None
    else:
        number = attempt or ti.try_number
        name = attempt_name(workload.jobset_name, ti.dag_id, ti.run_id, ti.task_id, number)
        labels = {**L.run_labels(ti.dag_id, ti.run_id, ti.task_id, checkpointing.run_name),
                  L.TRY_NUMBER: str(ti.try_number), L.ATTEMPT: str(number)}
    body = build_jobset(slices, checkpointing, dataclasses.replace(workload, jobset_name=name), labels, customization)
    return name, body


def submit(hook: Any, log: Any, rendered: tuple[str, dict[str, Any]], jobset_name: str, namespace: str,
           run_labels: Mapping[str, str], owner: Mapping[str, Any], attempt: int,
           history: list[int | None]) -> dict[str, Any]:
    """Create attempt `attempt` from the try's rendered body (renumbered, with the step history it starts from);
    a create the API refuses fails for good or retries by core.attempt.resubmission.decide_rejected."""
    name, body = renumbered({"jobset_name": jobset_name, "body": rendered[1]}, owner, attempt, history)
    try:
        obj, created = hook.submit_attempt(namespace, name, body, run_labels)
    except ApiUnreachable:
        raise  # an outage, not a rejection: execute() says so
    except ApiError as exc:
        if isinstance(exc, Forbidden) and exc.rbac:
            raise  # RBAC, not the spec: execute fails the try without releasing anything
        decision = decide_rejected(exc.status, str(exc))
        if decision.kind == FAIL:
            raise AirflowFailException(decision.reason) from exc
        raise JobSetAttemptFailed(decision.reason) from exc
    if created:
        log.info("submitted JobSet %s/%s (attempt %s, try %s, newest finalized step %s)", namespace, name, attempt,
                 owner.get("try_number"), history[-1])
    return obj


def next_in_trigger(rendered: tuple[str, dict[str, Any]], workload: WorkloadSpec, console: Any,
                    keep: int) -> dict[str, Any]:
    """What the trigger needs to submit the next attempt of this try itself (triggers.next_in_try): the try's body
    (a manifest holds references to Secrets, never their values), the console's scope and keep_failed_attempts."""
    scope = None if console is None else {"project_id": console.project_id, "location": console.location,
                                          "cluster_name": console.cluster_name,
                                          "replicated_job": workload.replicated_job_name}
    return {NEXT_ATTEMPT: {"jobset_name": workload.jobset_name, "body": copy.deepcopy(rendered[1]), "console": scope},
            "keep_failed_attempts": keep}


def latest_step(store: CheckpointStore | None, checkpoint_dir: str, slices: SliceSpec | None,
                checkpointing: CheckpointingSpec | None, listing_timeout: float | None, log: Any) -> int | None:
    """The newest restorable step (docs/resubmission.md, "Progress"; a complete replicator backup counts); None
    without a store. A failing listing is waited out for listing_timeout: a storage outage spends no retry."""
    if store is None:
        return None
    from mtc_provider.adapters.checkpoint_stores import list_newest
    from mtc_provider.adapters.retry import through_listing_outage
    from mtc_provider.core.measure.progress import replicator_backup_dir

    backup_dir = replicator_backup_dir(checkpointing) if checkpointing is not None else None
    nodes = slices.num_slices * slices.hosts_per_slice if slices is not None else None
    found = through_listing_outage(lambda: list_newest(store, checkpoint_dir, None, backup_dir, nodes).restorable(),
                                   checkpoint_dir, listing_timeout, log)
    return found.step if found else None


def watch_trigger(connection: Mapping[str, Any], namespace: str, obj: Mapping[str, Any],
                  checkpointing: CheckpointingSpec | None, slices: SliceSpec, google: tuple[str, Any], watch: Any,
                  extra: dict[str, Any]) -> JobSetTrigger:
    """The trigger that follows one attempt (triggers.jobset), listing the checkpoints (none without `checkpointing`)
    for stalls and progress; `extra` comes back in its event: the attempt's bookkeeping survives the deferral."""
    from mtc_provider.core.measure.progress import replicator_backup_dir
    from mtc_provider.triggers.jobset import JobSetTrigger

    return JobSetTrigger(
        connection=connection, namespace=namespace, name=obj["metadata"]["name"],
        resource_version=obj["metadata"].get("resourceVersion"), restarts_seen=evaluate_jobset(obj).restarts,
        checkpoint_dir=checkpointing.checkpoint_directory if checkpointing is not None else None,
        gcp_conn_id=google[0], impersonation_chain=google[1], watch=watch,
        backup_dir=replicator_backup_dir(checkpointing) if checkpointing is not None else None,
        backup_nodes=slices.num_slices * slices.hosts_per_slice, extra=extra)


async def first_event(trigger: JobSetTrigger) -> dict[str, Any]:
    """The synchronous path: the deferrable path's trigger, run in the worker to its first event."""
    async for event in trigger.run():
        return event.payload
    return JobSetEvent(ERROR, trigger.namespace, trigger.name, message="the watch ended without an event").to_payload()
