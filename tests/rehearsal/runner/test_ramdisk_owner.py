"""The ramdisk root on shared tmpfs (issue 23, `ramdisk_owner`): `/dev/shm/mtc-<uid>-<hash of home>` can be
guessed, so another user could make it first (or make it a symbolic link) and read the checkpoints or steer the
runner's writes. It is created `os.mkdir(mode=0o700)` and checked with `os.lstat`, or refused with an error
naming the path, its owner and what is expected.

Another user's directory is simulated as root (the tests run as root here): a directory chowned to uid 65534, a
symbolic link, a directory others may write into.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from mtc_provider.adapters.protocols import ApiError
from mtc_local.runner.ramdisk import RamdiskRootError, check_private_root, ensure_private_root
from mtc_local.shared.state import Home
from tests.support.local_cluster import make_jobset, processes_mentioning, terminal

NS = "default"
NOBODY = 65534
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="making a directory of another user needs root")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_ramdisk_owner_a_new_root_is_this_users_and_0700(tmp_path):
    root = ensure_private_root(tmp_path / "shm" / "mtc-root")
    info = os.lstat(root)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and mode(root) == 0o700
    assert ensure_private_root(root) == root  # again: checked, kept


def test_ramdisk_owner_a_symbolic_link_is_refused_and_never_followed(tmp_path):
    elsewhere = tmp_path / "victim"
    elsewhere.mkdir(mode=0o755)
    root = tmp_path / "mtc-root"
    root.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(RamdiskRootError) as raised:
        ensure_private_root(root)
    message = str(raised.value)
    assert str(root) in message and "symbolic link" in message and str(elsewhere) in message
    assert "expected a directory owned by uid" in message and "mode 0700" in message
    assert mode(elsewhere) == 0o755 and list(elsewhere.iterdir()) == []  # the target was not touched


@needs_root
def test_ramdisk_owner_another_users_directory_is_refused(tmp_path):
    root = tmp_path / "mtc-root"
    root.mkdir(mode=0o700)
    os.chown(root, NOBODY, NOBODY)
    with pytest.raises(RamdiskRootError, match=rf"{root} is owned by uid {NOBODY}.*expected a directory owned by "
                                               rf"uid {os.getuid()}.* with mode 0700"):
        ensure_private_root(root)
    assert os.lstat(root).st_uid == NOBODY and mode(root) == 0o700  # refused, not taken over


def test_ramdisk_owner_a_root_others_may_write_into_is_refused_and_a_readable_one_tightened(tmp_path):
    open_root = tmp_path / "open"
    open_root.mkdir()
    os.chmod(open_root, 0o777)
    with pytest.raises(RamdiskRootError, match="writable by others \\(mode 0777\\)"):
        ensure_private_root(open_root)
    readable = tmp_path / "readable"
    readable.mkdir()
    os.chmod(readable, 0o755)  # an older version's root: only its owner could write into it
    assert check_private_root(readable) and mode(readable) == 0o700
    plain = tmp_path / "file"
    plain.write_text("")
    with pytest.raises(RamdiskRootError, match="is not a directory"):
        ensure_private_root(plain)


def test_ramdisk_owner_name_is_per_user(tmp_path):
    assert Home.of(tmp_path).shm_root.name.startswith(f"mtc-{os.getuid()}-")


@needs_root
def test_ramdisk_owner_a_planted_root_stops_the_supervisor_before_anything_runs(home, tmp_path):
    """Another user made the home's ramdisk root first: the local cluster refuses to start and says why."""
    root = Home.of(home).shm_root
    root.parent.mkdir(parents=True, exist_ok=True)
    root.mkdir(mode=0o777)
    os.chown(root, NOBODY, NOBODY)
    try:
        from mtc_local.cluster.lifecycle import ClusterUnavailable, ensure_running

        with pytest.raises(ClusterUnavailable, match="supervisor.log"):
            ensure_running(home, timeout=5)
        log = Home.of(home).supervisor_log.read_text()
        assert f"error: ramdisk root {root} is owned by uid {NOBODY}" in log, log[-2000:]
        assert list(root.iterdir()) == []
    finally:
        deadline = time.monotonic() + 10  # each supervisor it started exits at once; none may outlive the root
        while processes_mentioning(home) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.rmdir(root)


def test_ramdisk_owner_a_root_replaced_while_running_refuses_the_next_jobset(api, workload: Path, tmp_path):
    """The last JobSet's delete removed the (empty) root and a link to someone else's folder took its name: the
    next JobSet is refused (HTTP 500 naming the path), nothing is stored or started, nothing is written through
    the link."""
    api.create(NS, make_jobset("first", workload, ["steps=2"]))
    terminal(api, NS, "first")
    api.delete(NS, "first")
    root = api.home.shm_root
    assert not os.path.lexists(root)  # nothing left on tmpfs
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.symlink_to(elsewhere, target_is_directory=True)
    try:
        with pytest.raises(ApiError) as raised:
            api.create(NS, make_jobset("second", workload, ["steps=2"]))
        assert raised.value.status == 500 and f"ramdisk root {root} is a symbolic link" in str(raised.value)
        assert not api.home.jobset_file(NS, "second").exists() and api.list(NS, "") == []
        assert list(elsewhere.iterdir()) == [] and not processes_mentioning(str(workload))
    finally:
        root.unlink()
