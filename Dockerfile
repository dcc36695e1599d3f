# Airflow 3 image with this provider installed (not _PIP_ADDITIONAL_REQUIREMENTS: the image is built once).
# The Airflow version is the one uv.lock pins (tests/deploy checks they agree).
FROM apache/airflow:3.3.2-python3.11

USER airflow
WORKDIR /opt/airflow/provider-src
COPY --chown=airflow:root pyproject.toml README.md ./
COPY --chown=airflow:root provider ./provider
# The same install command the README gives for an existing Airflow environment.
RUN pip install --no-cache-dir ".[local]"
WORKDIR /opt/airflow
# A named volume mounted here starts as a copy of this folder, owner included: writable by the airflow user
# (uid 50000). airflow-init also chowns it to AIRFLOW_UID when that differs.
RUN mkdir -p /opt/airflow/mtc-local /opt/airflow/config
