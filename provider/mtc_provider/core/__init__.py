"""The pure core: plain dataclasses and functions. No Airflow, Kubernetes client or network imports.

A test (tests/core/test_purity.py) imports every module here with Airflow and the clients blocked.
"""
