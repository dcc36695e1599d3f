"""Adapters: I/O only, each behind a small Protocol (protocols.py) so the Airflow glue never knows the target."""
