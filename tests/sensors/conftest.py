"""Fixtures for the tests of the sensors, shared with other folders: tests/support/checkpoint_fixtures.py (the counting
GCS emulator)."""

from tests.support.checkpoint_fixtures import gcs  # noqa: F401
