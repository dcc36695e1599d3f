# Airflow 3 image with this provider installed (not _PIP_ADDITIONAL_REQUIREMENTS: the image is built once).
FROM apache/airflow:3.3.2-python3.11

USER airflow
WORKDIR /opt/airflow/provider-src
COPY --chown=airflow:root pyproject.toml README.md ./
COPY --chown=airflow:root provider ./provider
# The same install command the README gives for an existing Airflow environment.
RUN pip install --no-cache-dir ".[local]"
WORKDIR /opt/airflow
