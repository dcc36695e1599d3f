"""Apache Airflow provider for resilient TPU training on GKE with Multi-Tier Checkpointing."""

__version__ = "0.1.0"
