# Airflow 3 images with this provider installed (not _PIP_ADDITIONAL_REQUIREMENTS: the image is built once).
# Two targets, both with exactly the versions uv.lock pins (tests/deploy/test_compose.py checks this file offline):
#   docker build --target gke -t REGISTRY/airflow-mtc:TAG .    GKE only: no JAX, for the Helm chart or any cluster
#   docker build --target local .                              the local rehearsal (JAX and Orbax on the CPU);
#                                                              docker-compose.yaml builds this one (the default)
# The Airflow version of the base image is the one uv.lock pins.

# The uv the Makefile pins (UV_VERSION), from its official image.
FROM ghcr.io/astral-sh/uv:0.13.8 AS uv

# The provider's wheel and the lock's pins, exported per target (--frozen: the lock as committed, never re-resolved).
FROM apache/airflow:3.3.2-python3.11 AS build
COPY --from=uv /uv /usr/local/bin/uv
WORKDIR /tmp/provider-src
COPY --chown=airflow:root pyproject.toml uv.lock README.md LICENSE CHANGELOG.md ./
COPY --chown=airflow:root provider ./provider
COPY --chown=airflow:root rehearsal ./rehearsal
# Two wheels: the provider, and the rehearsal (mtc-local, the workspace member in rehearsal/) in its own folder.
RUN uv build --wheel --out-dir /tmp/mtc-dist . \
 && uv build --wheel --package mtc-local --out-dir /tmp/mtc-local-dist \
 && uv export --quiet --frozen --no-hashes --no-dev --no-emit-project --no-emit-workspace --extra chart --extra deploy --extra goodput --output-file /tmp/mtc-dist/requirements-gke.txt \
 && uv export --quiet --frozen --no-hashes --no-dev --no-emit-project --no-emit-workspace --extra chart --extra deploy --extra goodput --extra local --output-file /tmp/mtc-local-dist/requirements-local.txt

# GKE only: the provider, the goodput chart (`chart`), MaxText's goodput reader (`goodput`: ml-goodput-measurement) and
# the Celery/PostgreSQL deployment (`deploy`); no `local`:
# neither its packages nor the mtc-local wheel (the rehearsal's servers) are in this image.
FROM apache/airflow:3.3.2-python3.11 AS gke
USER airflow
COPY --from=build /tmp/mtc-dist /tmp/mtc-dist
RUN pip install --no-cache-dir -r /tmp/mtc-dist/requirements-gke.txt /tmp/mtc-dist/airflow_provider_mtc-*.whl
WORKDIR /opt/airflow

# The local rehearsal: the GKE image plus the `local` extra (the mtc-local wheel, JAX on the CPU, Orbax), same lock.
FROM gke AS local
COPY --from=build /tmp/mtc-local-dist /tmp/mtc-local-dist
RUN pip install --no-cache-dir -r /tmp/mtc-local-dist/requirements-local.txt /tmp/mtc-local-dist/mtc_local-*.whl
# A named volume mounted here starts as a copy of this folder, owner included: writable by the airflow user
# (uid 50000). airflow-init also chowns it to AIRFLOW_UID when that differs.
RUN mkdir -p /opt/airflow/mtc-local /opt/airflow/config
