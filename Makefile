# Two commands do all set-up on a fresh machine with nothing but Python 3.10+:
#   make demo   - the resilient training pipeline on the local target, with a summary and a goodput chart
#   make test   - the whole test suite (slow end-to-end tests included)
PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: demo test test-fast test-lowest soak venv docs dist clean browser

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)

# The environment is rebuilt from the lock file whenever it changes. --compile-bytecode: every test starts Python
# processes (Airflow's components, task processes, JAX workloads, the CLI) that import Airflow, the Kubernetes
# clients and JAX; without .pyc files (PYTHONDONTWRITEBYTECODE, a read-only or fresh environment) each of them
# compiles those sources again: 11-12 s of CPU per `import` of the provider's stack, 3.9 s compiled (issue #36).
$(VENV)/.synced: $(UV) uv.lock pyproject.toml
	$(UV) sync --frozen --all-extras --compile-bytecode
	touch $@

venv: $(VENV)/.synced

demo: venv
	$(VENV)/bin/python scripts/demo.py $(ARGS)

# The browser test drives Debian's Chromium (installed here when missing; needs root, as in CI).
# WORKERS=N: N test processes (pytest-xdist, `--dist loadgroup`: the tests of a folder that share one expensive
# set-up stay on one worker, tests/conftest.py); WORKERS=1: one process. Default 2, as CI runs it: the suite mostly
# waits (trainings' steps, Airflow's loops; load 0.6-1.6 on 2 cores through a one-process run): 34 min 38 s in one
# process, 20 min 43 s in two on a quiet fresh clone (docs/benchmarks.md, "The suite's time").
WORKERS ?= 2
XDIST = $(if $(filter-out 0 1,$(WORKERS)),-n $(WORKERS) --dist loadgroup)
# --durations=20: every run (CI's included) prints its 20 slowest steps, so the suite's time stays visible.
test: venv browser
	$(VENV)/bin/python -m pytest -ra --durations=20 $(XDIST)

browser:
	@bash .ci/install-browser || echo "could not install chromium: the UI test (tests/e2e) will say so"

test-fast: venv
	$(VENV)/bin/python -m pytest -ra -m "not slow" $(XDIST)

# The lowest-direct-versions job: every direct dependency at its declared lower bound, then the fast tests
# (its own .venv-lowest; 9 to 18 minutes on this machine, so it is not part of `make test`).
test-lowest: venv
	bash scripts/test-lowest.sh $(XDIST)

# The long rehearsals (the `soak` marker; about 22 minutes; not in `make test`, CI runs both): the orchestrator-fault
# soak (tests/deploy/test_soak.py: the resilient DAG through the deployed topology for over 10 minutes of training
# under a seeded fault schedule; its figures go to benchmarks/results/soak.json, MTC_SOAK_SEED=<seed> replays a
# schedule), a compressed week of interruptions, the chaos schedule, and an in-try attempt while every worker slot
# is taken, and real MaxText restarted in the cluster after a graceful preemption (the non-default in_cluster option).
SOAK_TESTS := tests/deploy/test_soak.py tests/operators/jobset/test_js_week.py tests/chaos/test_chaos.py \
	tests/e2e/test_next_in_trigger.py tests/conformance/test_real_maxtext_cpu.py
soak: venv
	MTC_SOAK_RESULTS=$${MTC_SOAK_RESULTS:-benchmarks/results/soak.json} $(VENV)/bin/python -m pytest -ra -s -m soak \
		-p no:cacheprovider $(SOAK_TESTS)

docs: venv
	$(VENV)/bin/mkdocs build --strict

# The wheel and sdist to install where Airflow runs (Composer, the Helm chart's image, any pip): built by the
# pinned uv, checked by twine (the `test` extra). The version comes from mtc_provider.__version__ alone.
# The rehearsal's (mtc-local, what the `local` extra installs) go to $(DIST)/local.
DIST ?= dist
dist: venv
	rm -rf $(DIST)
	$(UV) build --sdist --wheel --out-dir $(DIST)
	$(UV) build --package mtc-local --sdist --wheel --out-dir $(DIST)/local
	$(VENV)/bin/python -m twine check --strict $(DIST)/*.whl $(DIST)/*.tar.gz $(DIST)/local/*

clean:
	rm -rf $(VENV) $(TOOLS) site .venv-lowest dist
