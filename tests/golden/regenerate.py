"""Regenerate the golden manifests from the example run descriptions.

    .venv/bin/python tests/golden/regenerate.py

Review the diff before committing: a golden file changes only when the manifests are meant to change.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent
# golden file -> the example run description it is rendered from
CASES = {
    "gke-v6e.yaml": "examples/gke-v6e.yaml",  # v6e, 2 slices of 4x8
    "gke-v5p.yaml": "examples/gke-v5p.yaml",  # v5p, 4 slices of 2x2x2
    "gke-v5e-grace.yaml": "examples/gke-v5e-grace.yaml",  # v5e, custom termination grace period
}


def render(example: str) -> str:
    from mtc_provider.cli.app import load_config, render_manifests
    from mtc_provider.core.definition.description.plan import build_plan

    return render_manifests(build_plan(load_config(REPO / example)).manifests)


def main() -> None:
    for golden, example in CASES.items():
        (GOLDEN / golden).write_text(render(example), encoding="utf-8")
        print(f"wrote {GOLDEN / golden} from {example}")


if __name__ == "__main__":
    main()
