"""The local MTC replicator's layout and its "newest complete backup" rule (mtc_local.runner.replicator).

The layout is the one ml-auto-solutions' `dags/orbax/util/validation_util.py` reads (`<time>/` folders of
`<job>-s<step>-n<node>-w<worker>.meta` naming a `D<hash>.data` folder beside them) and the provider lists
(core.measure.listing.backup_steps); a step is restorable only when every node backed it up (docs/maxtext.md, "Multi-tier
mode: the local replicator")."""

from __future__ import annotations

import json
import shutil

import pytest

from mtc_provider.core.basics.errors import SpecError
from mtc_provider.core.measure.listing import backup_steps, parse_mtc_backup
from mtc_local.runner.replicator import (
    Replicator,
    complete_backups,
    from_argv,
    meta_name,
    newest_complete_backup,
)


def _save(ramdisk, step, payload=None):
    (ramdisk / str(step)).mkdir(parents=True)
    (ramdisk / str(step) / "state").write_text(payload or f"step {step}")


@pytest.fixture
def ramdisks(tmp_path):
    disks = {node: tmp_path / f"ramdisk-{node}" for node in range(2)}
    for disk in disks.values():
        disk.mkdir()
    return disks


def test_a_backup_is_in_the_replicators_layout_and_the_providers_listing_reads_it(tmp_path, ramdisks):
    for node, disk in ramdisks.items():
        _save(disk, 4, f"node {node}")
    replicator = Replicator("run", tmp_path / "bucket" / "run", interval_steps=2)
    assert replicator.backup(ramdisks, now=0.0) == 4
    names = sorted(p.relative_to(tmp_path / "bucket").as_posix() for p in (tmp_path / "bucket").rglob("*.meta"))
    assert names == ["run/1970-01-01_00-00/run-s4-n0-w0.meta", "run/1970-01-01_00-00/run-s4-n1-w0.meta"]
    assert [parse_mtc_backup(n).node for n in names] == [0, 1] and backup_steps(names, workers=2) == [4]
    meta = tmp_path / "bucket" / names[1]
    data = meta.parent / json.loads(meta.read_text())["data"]
    assert data.name.startswith("D") and data.name.endswith(".data")
    assert (data / "state").read_text() == "node 1"  # each node's own local tier, not a copy of one
    assert replicator.backup(ramdisks, now=1.0) is None  # nothing newer: no second copy


def test_only_a_step_every_ramdisk_holds_is_backed_up(tmp_path, ramdisks):
    for node, step in ((0, 2), (1, 2), (0, 4)):  # node 1 has not saved 4 yet
        _save(ramdisks[node], step)
    replicator = Replicator("run", tmp_path / "run", interval_steps=1)
    assert replicator.backup(ramdisks, now=0.0) == 2


def test_the_backup_interval_in_steps_and_in_minutes(tmp_path, ramdisks):
    for disk in ramdisks.values():
        _save(disk, 2)
    by_steps = Replicator("run", tmp_path / "a", interval_steps=4)
    assert by_steps.backup_due(ramdisks, now=0.0)  # the first backup
    by_steps.backup(ramdisks, now=0.0)
    for disk in ramdisks.values():
        _save(disk, 4)
    assert not by_steps.backup_due(ramdisks, now=0.0)  # 4 < 2 + 4
    for disk in ramdisks.values():
        _save(disk, 6)
    assert by_steps.backup_due(ramdisks, now=0.0)
    by_minutes = Replicator("run", tmp_path / "b", interval_seconds=60.0, last_backup_at=100.0)
    assert not by_minutes.backup_due(ramdisks, now=159.0) and by_minutes.backup_due(ramdisks, now=160.0)


def test_the_newest_complete_backup_ignores_a_step_some_node_lacks(tmp_path):
    root = tmp_path / "run"
    folder = root / "2026-12-02_09-00"
    folder.mkdir(parents=True)
    for step, nodes in ((4, (0, 1)), (6, (0,))):  # step 6: node 1's backup never arrived
        for node in nodes:
            (folder / f"D{step}{node}.data").mkdir()
            (folder / meta_name("run", step, node)).write_text(json.dumps({"data": f"D{step}{node}.data"}))
    (folder / meta_name("other-run", 8, 0)).write_text(json.dumps({"data": "x"}))  # another job's
    (folder / meta_name("other-run", 8, 1)).write_text(json.dumps({"data": "x"}))
    assert set(complete_backups(root, "run", [0, 1])) == {4}
    assert newest_complete_backup(root, "run", [0, 1]) == 4
    assert newest_complete_backup(root, "run", [0]) == 6
    assert newest_complete_backup(tmp_path / "none", "run", [0, 1]) is None


def test_a_restore_refills_a_wiped_ramdisk_from_the_newest_complete_backup(tmp_path, ramdisks):
    replicator = Replicator("run", tmp_path / "run", interval_steps=1)
    for node, disk in ramdisks.items():
        _save(disk, 4, f"node {node} step 4")
    replicator.backup(ramdisks, now=0.0)
    for node, step in ((0, 6), (1, 6), (0, 8)):  # step 8: a save node 1 never finished
        _save(ramdisks[node], step)
    shutil.rmtree(ramdisks[1])  # node 1's ramdisk is wiped (a host lost)
    fresh = Replicator("run", tmp_path / "run", interval_steps=1)  # a new start of the pods
    assert fresh.restore(ramdisks) == (4, "backup")
    assert {int(p.name) for p in ramdisks[0].iterdir()} == {4} and {int(p.name) for p in ramdisks[1].iterdir()} == {4}
    assert (ramdisks[1] / "4" / "state").read_text() == "node 1 step 4"
    assert fresh.backed_up == 4  # it does not back the restored step up again


def test_a_meta_whose_data_is_missing_is_an_incomplete_backup_and_the_restore_takes_the_one_before(
        tmp_path, ramdisks):
    """A `.meta` names its data folder (written first); a copy whose data folder is gone (deleted by a lifecycle
    rule, a half-removed backup) is skipped as incomplete instead of failing the restore of every ramdisk."""
    replicator = Replicator("run", tmp_path / "run", interval_steps=1)
    for disk in ramdisks.values():
        _save(disk, 4)
    replicator.backup(ramdisks, now=0.0)
    for disk in ramdisks.values():
        _save(disk, 6)
    replicator.backup(ramdisks, now=120.0)
    folder = tmp_path / "run" / "1970-01-01_00-02"
    shutil.rmtree(folder / json.loads((folder / meta_name("run", 6, 1)).read_text())["data"])
    for disk in ramdisks.values():
        shutil.rmtree(disk)
    assert set(complete_backups(tmp_path / "run", "run", [0, 1])) == {4}
    assert Replicator("run", tmp_path / "run", interval_steps=1).restore(ramdisks) == (4, "backup")
    assert all({p.name for p in disk.iterdir()} == {"4"} for disk in ramdisks.values())


def test_a_restore_keeps_the_peers_newer_common_step(tmp_path, ramdisks):
    replicator = Replicator("run", tmp_path / "run", interval_steps=1)
    for disk in ramdisks.values():
        _save(disk, 4)
    replicator.backup(ramdisks, now=0.0)
    for disk in ramdisks.values():
        _save(disk, 6)
    _save(ramdisks[1], 8)
    assert replicator.restore(ramdisks) == (6, "peers")
    assert not (ramdisks[1] / "8").exists()  # every process resumes the same step


def test_nothing_to_restore_empties_an_inconsistent_local_tier(tmp_path, ramdisks):
    _save(ramdisks[0], 2)
    assert Replicator("run", tmp_path / "run").restore(ramdisks) == (None, "nothing")
    assert not (ramdisks[0] / "2").exists()


def test_only_a_multi_tier_command_gets_a_replicator(tmp_path):
    base = str(tmp_path / "buckets" / "b")
    flags = ["python", "-m", "mtc_local.light_workload", "run_name=r", f"base_output_directory={base}"]
    assert from_argv(flags + ["enable_multi_tier_checkpointing=False"]) is None
    replicator = from_argv(flags + ["enable_multi_tier_checkpointing=True",
                                    "multi_tier_checkpointing_backup_interval_steps=4"])
    assert replicator.root == tmp_path / "buckets" / "b" / "r" and replicator.interval_steps == 4
    assert from_argv(flags + ["enable_multi_tier_checkpointing=True",
                              "multi_tier_checkpointing_backup_interval_minutes=2"]).interval_seconds == 120.0
    with pytest.raises(SpecError) as caught:
        from_argv(["run_name=r", "base_output_directory=gs://b", "enable_multi_tier_checkpointing=True"])
    assert caught.value.field == "base_output_directory" and caught.value.value == "gs://b"
