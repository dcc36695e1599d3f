"""A new checkpoint becomes an asset event that schedules a downstream DAG, through Airflow's own machinery.

The AssetWatcher's trigger normally runs in the triggerer, which hands each yielded event to
`Trigger.submit_event`; that records the asset event and queues the consumer DAGs. Here the DAG is parsed and
synced to the metadata DB as the dag processor does, the trigger row the sync created is instantiated from its
stored classpath/kwargs and run (as the triggerer would), and its event goes through the same
`Trigger.submit_event`. Then the scheduler's own asset-triggered dag-run creation is checked through the queue.
"""

from __future__ import annotations

import textwrap

import pytest
from tests.support.checkpoint_fixtures import run_orbax

pytestmark = pytest.mark.timeout(180)

DAG_FILE = '''
import pendulum
from airflow.sdk import DAG, task
from mtc_provider.assets import checkpoint_asset, checkpoint_from_event

checkpoints = checkpoint_asset({directory!r}, "asset-run", poll_interval=1)

with DAG("evaluate_checkpoint", schedule=[checkpoints], start_date=pendulum.datetime(2026, 1, 1)):
    @task
    def evaluate(triggering_asset_events=None):
        return [checkpoint_from_event(e).step for e in triggering_asset_events[checkpoints]]

    evaluate()
'''


async def test_new_checkpoint_schedules_downstream_dag(airflow_db, tmp_path):
    from sqlalchemy import select

    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    directory = str(tmp_path / "asset-run" / "checkpoints")
    assert run_orbax(directory, "10", "20").returncode == 0
    dag_folder = tmp_path / "dags"
    dag_folder.mkdir()
    (dag_folder / "evaluate.py").write_text(textwrap.dedent(DAG_FILE.format(directory=directory)))

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=str(dag_folder), bundle_path=dag_folder)
    assert not bag.import_errors and "evaluate_checkpoint" in bag.dags
    sync_bag_to_db(bag, "dags-folder", None)

    with create_session() as session:
        asset = session.scalars(select(AssetModel).where(AssetModel.uri == f"file://{directory}")).one()
        triggers = [w.trigger for w in asset.watchers]
        assert len(triggers) == 1, "the sync registered the watcher's trigger"
        row = triggers[0]
        trigger_id, classpath, kwargs = row.id, row.classpath, row.kwargs
    assert classpath == "mtc_provider.triggers.checkpoint.CheckpointAssetTrigger"

    from airflow.sdk._shared.module_loading import import_string

    trigger = import_string(classpath)(**kwargs)
    events = trigger.run()
    first = await anext(events)  # the newest existing checkpoint
    assert first.payload["step"] == 20
    Trigger.submit_event(trigger_id=trigger_id, event=first)

    assert run_orbax(directory, "30").returncode == 0  # training goes on: a new checkpoint
    second = await anext(events)
    await events.aclose()
    assert second.payload["step"] == 30
    Trigger.submit_event(trigger_id=trigger_id, event=second)

    with create_session() as session:
        recorded = session.scalars(select(AssetEvent).where(AssetEvent.asset_id == asset.id)
                                   .order_by(AssetEvent.id)).all()
        assert [e.extra["payload"]["step"] for e in recorded] == [20, 30]
        assert recorded[0].extra["from_trigger"] is True
        assert recorded[1].extra["payload"]["run_name"] == "asset-run"
        queued = session.scalars(select(AssetDagRunQueue.target_dag_id)
                                 .where(AssetDagRunQueue.asset_id == asset.id)).all()
        assert queued == ["evaluate_checkpoint"]
