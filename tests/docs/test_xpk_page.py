"""The xpk page maps every customization field and the xpk flags a MaxText user passes today."""

from __future__ import annotations

import dataclasses

from mtc_provider.core.definition.render.customization import CustomizationSpec
from tests.conftest import REPO

PAGE = (REPO / "docs" / "xpk.md").read_text(encoding="utf-8")
# `xpk workload create` flags (xpk's parser/workload.py) a MaxText user passes.
XPK_FLAGS = ("--workload", "--cluster", "--command", "--tpu-type", "--num-slices", "--docker-image", "--max-restarts",
             "--termination-grace-period-seconds", "--ttl-seconds-after-finished", "--priority", "--spot",
             "--reservation", "--on-demand", "--scheduler", "--env", "--ramdisk-directory", "--mtc_enabled",
             "--restart-on-user-code-failure", "--base-docker-image", "--docker-name", "--storage", "--dry-run")


def test_every_customization_field_is_documented_on_the_xpk_page() -> None:
    missing = [f.name for f in dataclasses.fields(CustomizationSpec) if f"customization.{f.name}" not in PAGE
               and f"  {f.name}:" not in PAGE]
    assert not missing


def test_every_xpk_flag_has_a_row() -> None:
    rows = [line for line in PAGE.splitlines() if line.startswith("| `")]
    missing = [flag for flag in XPK_FLAGS if not any(f"`{flag}" in row.split("|")[1] for row in rows)]
    assert not missing
