"""Executors the provider ships: `local.PreloadLocalExecutor` (Airflow's LocalExecutor with the launch tries'
imports made once, before its workers are forked)."""
