from __future__ import annotations

import sys
from pathlib import Path

# Make tests/core/core_helpers.py importable as `core_helpers` from the tests in this folder.
sys.path.insert(0, str(Path(__file__).resolve().parent))
