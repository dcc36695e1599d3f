"""CheckpointProgressSensor: waits for a run's restorable progress to reach a target step; a run that makes
no restorable progress for `stall_timeout` seconds fails with CheckpointStalled (a retryable failure).

Restorable progress is what a new start can resume from: finalized persistent checkpoints and, in multi-tier mode
(MaxText writes no persistent checkpoint then), the MTC replicator's backups complete across every node of the run
(adapters.checkpoint_stores `Newest.restorable`, as the JobSet trigger and the attempt's decision read it;
docs/resubmission.md, "Progress").

XCom (return value): latest_step, commit_time, steps_per_hour, seconds_since_checkpoint, target_step,
checkpoint_dir, source (`checkpoints` or `replicator-backup`: where latest_step was found). A log line per new step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from mtc_provider.core.basics.errors import CheckpointStalled, MtcError, SpecError

if TYPE_CHECKING:  # the stores and the trigger are imported where they run: DAG files stay light
    from mtc_provider.core.measure.progress import Progress
    from mtc_provider.triggers.checkpoint import RestorableProgress


def _positive_number(field: str, value: Any, cast: type = float) -> Any:
    try:
        number = cast(value)
    except (TypeError, ValueError):
        raise SpecError(field, value, "a positive number") from None
    if isinstance(value, bool) or number <= 0:
        raise SpecError(field, value, "a positive number")
    return number


def replicator_backups(slices: Any, checkpointing: Any) -> tuple[str | None, int | None]:
    """(backup folder, node count) of a multi-tier run, whose MTC replicator backups are restorable progress; (None,
    None) for any other run or when no checkpointing section is given. The sections are the run description's (a
    spec, or its dict as the training DAG's plan task hands it on); SpecError names a bad field."""
    if checkpointing in (None, "", {}):
        return None, None
    from mtc_provider.core.definition.description.spec import CheckpointingSpec, spec_from_dict
    from mtc_provider.core.definition.shape.tpu import SliceSpec
    from mtc_provider.core.measure.progress import replicator_backup_dir

    backup_dir = replicator_backup_dir(spec_from_dict(CheckpointingSpec, "checkpointing", checkpointing))
    if backup_dir is None:
        return None, None
    if slices in (None, "", {}):  # a backup counts only once every node has it: without the slices, never
        raise SpecError("slices", slices, "the run's slices (tpu_type, topology, num_slices) in multi-tier mode, "
                                          "where a replicator backup counts once every node of the run has it")
    described = spec_from_dict(SliceSpec, "slices", slices)
    return backup_dir, described.num_slices * described.hosts_per_slice


class CheckpointProgressSensor(BaseSensorOperator):
    """Wait until a restorable step >= target_step exists: `<checkpoint_dir>/<step>/commit_success.txt`, or in
    multi-tier mode a replicator backup of the step complete across every node.

    :param checkpoint_dir: the run's persistent checkpoint directory, gs://... or a local path (templated).
    :param target_step: succeed when a finalized step reaches it (templated).
    :param stall_timeout: fail when no new finalized step appears for this many seconds (templated); None: never
        (the launch task's trigger judges stalls from every progress source: docs/resubmission.md).
    :param poll_interval: seconds between listings.
    :param window_s: window for steps per hour.
    :param gcp_conn_id: the Google Cloud connection that lists a gs:// checkpoint directory (templated).
    :param impersonation_chain: service account(s) to impersonate for the listing (templated), as the google
        provider's GCS operators take it.
    :param deferrable: wait in the triggerer (default: Airflow's operators.default_deferrable).
    :param checkpointing: the run's checkpointing section (CheckpointingSpec or its dict; templated); in multi-tier
        mode (`enable_multi_tier_checkpointing`) the replicator's complete backups count as well. None: persistent
        checkpoints only.
    :param slices: the run's slices (SliceSpec or its dict; templated): how many nodes a backup must cover.
    """

    template_fields: Sequence[str] = ("checkpoint_dir", "target_step", "stall_timeout", "gcp_conn_id",
                                      "impersonation_chain", "checkpointing", "slices")
    ui_color = "#d6eaf8"

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the checkpoint directory it watched, as an input dataset (mtc_provider.lineage)."""
        from mtc_provider.lineage import operator_lineage

        return operator_lineage(inputs=[self.checkpoint_dir])

    def __init__(self, *, checkpoint_dir: str, target_step: int | str, stall_timeout: float | str | None = 3600.0,
                 poll_interval: float = 60.0, window_s: float = 3600.0, gcp_conn_id: str = "google_cloud_default",
                 impersonation_chain: str | Sequence[str] | None = None,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 checkpointing: Any = None, slices: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.checkpoint_dir = checkpoint_dir
        self.target_step = target_step
        self.stall_timeout = stall_timeout
        self.poll_interval = _positive_number("poll_interval", poll_interval)
        self.window_s = _positive_number("window_s", window_s)
        self.gcp_conn_id = gcp_conn_id
        self.impersonation_chain = impersonation_chain
        self.deferrable = deferrable
        self.checkpointing = checkpointing
        self.slices = slices
        self._progress: RestorableProgress | None = None  # what this instance's pokes have seen
        self._backups: tuple[str | None, int | None] | None = None

    def _validate(self) -> None:
        # Templated values arrive as strings: convert once, naming the field when they are wrong.
        self.target_step = _positive_number("target_step", self.target_step, int)
        # None: no stall verdict here (the launch task's trigger, which sees every progress source, judges stalls).
        self.stall_timeout = None if self.stall_timeout in (None, "") else _positive_number("stall_timeout",
                                                                                           self.stall_timeout)
        from mtc_provider.adapters.checkpoint_stores import open_store

        open_store(self.checkpoint_dir, self.gcp_conn_id, self.impersonation_chain)  # SpecError on a bad directory, before any I/O
        self._backups = replicator_backups(self.slices, self.checkpointing)
        if self._backups[0]:
            self.log.info("multi-tier mode: a replicator backup under %s complete on all %d nodes counts as "
                          "progress, as a finalized checkpoint does", *self._backups)

    @property
    def _backup_dir_and_nodes(self) -> tuple[str | None, int | None]:
        if self._backups is None:  # a poke without execute (reschedule mode validates in execute; tests poke)
            self._backups = replicator_backups(self.slices, self.checkpointing)
        return self._backups

    def execute(self, context: Context) -> Any:
        self._validate()
        if not self.deferrable:
            return super().execute(context)
        from mtc_provider.triggers.checkpoint import CheckpointProgressTrigger

        backup_dir, backup_nodes = self._backup_dir_and_nodes
        self.defer(
            trigger=CheckpointProgressTrigger(
                checkpoint_dir=self.checkpoint_dir, target_step=self.target_step, stall_timeout=self.stall_timeout,
                poll_interval=self.poll_interval, gcp_conn_id=self.gcp_conn_id, started_at=time.time(),
                window_s=self.window_s, impersonation_chain=self.impersonation_chain, backup_dir=backup_dir,
                backup_nodes=backup_nodes),
            method_name="execute_complete",
        )

    def _first_poke_at(self, context: Context, now: float) -> float:
        """When this try began poking. In reschedule mode each poke is a new operator instance: the start is
        the first reschedule's date, which Airflow keeps for the try (otherwise the stall clock would restart
        on every poke and never fire)."""
        if self.mode != "reschedule":
            return now
        try:
            first = context["ti"].get_first_reschedule_date(context)
        except Exception as exc:  # noqa: BLE001 - without it, the clock starts now (logged)
            self.log.warning("could not read the first reschedule date (%s): the stall clock starts now", exc)
            first = None
        return first.timestamp() if first is not None else now

    def poke(self, context: Context) -> PokeReturnValue | bool:
        from mtc_provider.adapters.checkpoint_stores import list_newest, open_store
        from mtc_provider.triggers.checkpoint import RestorableProgress

        now = time.time()
        backup_dir, nodes = self._backup_dir_and_nodes
        if self._progress is None:
            self._progress = RestorableProgress(started_at=self._first_poke_at(context, now), window_s=self.window_s,
                                                backup_nodes=nodes)
        progress = self._progress
        store = open_store(self.checkpoint_dir, self.gcp_conn_id, self.impersonation_chain)
        # Reschedule mode lists everything each poke; a step's commit time (not "now") is when progress happened.
        progress.listed(list_newest(store, self.checkpoint_dir, progress.latest_step, backup_dir, nodes), now,
                        self.log, fresh=self.mode == "reschedule")
        reached = progress.reached(self.target_step)
        if reached:
            self.log.info(reached)
            return PokeReturnValue(is_done=True, xcom_value=self._xcom(progress.progress(now), progress.source))
        if self.stall_timeout is not None and progress.stalled(now, self.stall_timeout):
            raise CheckpointStalled(self.checkpoint_dir, progress.latest_step, progress.seconds_without_progress(now),
                                    self.stall_timeout)
        return False

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        from mtc_provider.triggers.checkpoint import LISTING_FAILED, REACHED, STALLED, CheckpointProgressEvent

        result = CheckpointProgressEvent.from_payload(event)
        for step, commit_time in result.new_checkpoints:
            self.log.info("new checkpoint: step %d (commit time %s)", step, commit_time)
        if result.status == REACHED:
            self.log.info(result.message)
            return self._xcom(result.progress, result.source)
        if result.status == STALLED:
            raise CheckpointStalled(self.checkpoint_dir, result.progress.latest_step, result.waited_s,
                                    float(self.stall_timeout))
        if result.status == LISTING_FAILED:  # not a stall: the run may be fine; the listing needs a person
            raise MtcError(result.message)
        raise MtcError(f"unexpected checkpoint progress event: {event}")

    def _xcom(self, progress: Progress, source: str | None) -> dict[str, Any]:
        return {**progress.to_payload(), "target_step": int(self.target_step), "checkpoint_dir": self.checkpoint_dir,
                "source": source}
