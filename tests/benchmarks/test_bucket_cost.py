"""The local bucket's cost model (local/bucket_cost.py): per-object latency plus bytes over per-host bandwidth,
off unless configured, and a clear error for a bad setting."""

from __future__ import annotations

import time

import pytest

from mtc_local.bucket_cost import BucketCost, UploadCost, from_env, pay_restore, step_objects


def test_off_unless_configured_and_each_setting_defaults_the_other():
    assert from_env({}) is None
    assert from_env({"MTC_BUCKET_LATENCY_MS": "20"}) == BucketCost(0.02, 200e6)
    assert from_env({"MTC_BUCKET_MB_PER_S": "100"}) == BucketCost(0.05, 100e6, 32)
    assert from_env({"MTC_BUCKET_MB_PER_S": "100", "MTC_BUCKET_CONCURRENCY": "4"}).concurrency == 4


@pytest.mark.parametrize("raw", ["0", "-3", "fast"])
def test_a_bad_setting_names_the_variable_and_the_value(raw):
    with pytest.raises(ValueError, match=f"MTC_BUCKET_MB_PER_S='{raw}': expected a positive number"):
        from_env({"MTC_BUCKET_MB_PER_S": raw})


def test_a_restore_pays_every_object_and_its_share_of_the_bytes(tmp_path):
    step = tmp_path / "12"
    (step / "default" / "d").mkdir(parents=True)
    (step / "default" / "d" / "0").write_bytes(b"x" * 4_000_000)
    (step / "commit_success.txt").write_bytes(b"")
    assert step_objects(step) == (2, 4_000_000)
    cost = BucketCost(latency_s=0.01, bytes_per_s=100e6, concurrency=1)
    assert cost.seconds(2, 4_000_000) == pytest.approx(0.06)
    assert BucketCost(0.01, 100e6, concurrency=32).seconds(33, 0) == pytest.approx(0.02)  # two rounds
    t0 = time.monotonic()
    paid = pay_restore(cost, step, hosts_sharing=2)  # two hosts per slice: each reads half the bytes
    assert time.monotonic() - t0 >= 0.04
    assert paid == {"bucket_objects": 2, "bucket_bytes": 4_000_000, "bucket_cost_s": pytest.approx(0.04)}
    assert pay_restore(None, step, 1) is None and pay_restore(cost, tmp_path / "missing", 1) is None


def test_an_upload_runs_in_the_background_until_joined(tmp_path):
    upload = UploadCost(BucketCost(latency_s=0.0, bytes_per_s=1e6), hosts_sharing=1)
    t0 = time.monotonic()
    upload.start(tmp_path, estimate_bytes=100_000, objects_estimate=1)  # 0.1 s
    assert time.monotonic() - t0 < 0.05  # the save itself does not block
    upload.join()
    assert time.monotonic() - t0 >= 0.1 and upload.paid_s == pytest.approx(0.1)
