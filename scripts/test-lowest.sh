#!/usr/bin/env bash
# The lowest-direct-versions job: resolve every direct dependency of pyproject.toml (runtime, `local`, `test`
# `goodput` and `deploy` extras) and of rehearsal/pyproject.toml (mtc-local) at the LOWEST version its lower bound allows, install that into its own virtual environment, and run
# the fast tests there. It proves the lower bounds in pyproject.toml are honest.
#
#   make test-lowest                 (or: bash scripts/test-lowest.sh [extra pytest args])
#
# Transitive dependencies resolve to their highest compatible versions (uv's `lowest-direct`), as a user's pip
# would pick them. The environment lives in .venv-lowest; the resolved pins are written to
# .venv-lowest/requirements.txt so a failure can be reproduced.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.tools/bin/uv}
VENV=${LOWEST_VENV:-.venv-lowest}
PYTHON=${LOWEST_PYTHON:-$(.venv/bin/python -c 'import sys; print(sys.executable)' 2>/dev/null || command -v python3)}
unset VIRTUAL_ENV UV_PROJECT_ENVIRONMENT

start=$(date +%s)
"$UV" venv --quiet --allow-existing --python "$PYTHON" "$VENV"
# The provider with its `local`, `test`, `goodput` and `deploy` extras, and the rehearsal (mtc-local, the workspace member the `local`
# extra names, which no index has): both editable, so both projects' dependencies are the direct ones.
printf -- '-e .[local,test,goodput,deploy]\n-e ./rehearsal\n' > "$VENV/requirements.in"
"$UV" pip compile --quiet "$VENV/requirements.in" --resolution lowest-direct \
    --python "$VENV/bin/python" --output-file "$VENV/requirements.txt"
# --compile-bytecode: the tests' Python processes then import compiled modules (see the Makefile's venv rule).
"$UV" pip sync --quiet --compile-bytecode --python "$VENV/bin/python" "$VENV/requirements.txt"
"$UV" pip install --quiet --python "$VENV/bin/python" --no-deps -e . -e ./rehearsal
echo "lowest direct versions ($(($(date +%s) - start)) s to resolve and install):"
grep -E '^(apache-airflow|apache-airflow-core|apache-airflow-task-sdk|apache-airflow-providers-google|apache-airflow-providers-cncf-kubernetes|google-cloud-storage|google-cloud-container|google-cloud-resource-manager|google-api-core|kubernetes|kubernetes-asyncio|pyyaml|typer|rich|tenacity|psutil|matplotlib)==' \
    "$VENV/requirements.txt" | sed 's/^/  /'
"$VENV/bin/python" -m pytest -q -m "not slow" -p no:cacheprovider --durations=20 "$@"
echo "lowest-direct job: $(($(date +%s) - start)) s in all"
