"""The provider's Airflow plugins (the training-run view)."""
