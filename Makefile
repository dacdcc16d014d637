# The two commands a fresh machine needs (see README):
#   make demo   install, then run the retrieval_eval job on the embedded defaults (scripts/run_job.sh:
#               exit 0 every gate passed, 1 a gate failed, 2 the run broke before a verdict)
#   make test   install, then lint and run the whole test suite (the unit lane, then integration)
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
STATE_DIR ?= $(CURDIR)/.eval_state
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Everything Dagster needs before it loads dagster.yaml: the embedded server is started (or
# reused) and its URL exported; artifacts and compute logs go under the state dir.
DAGSTER_ENV = export DAGSTER_HOME=$(CURDIR) \
	EVAL_PIPELINE_STATE_DIR=$(STATE_DIR) \
	EVAL_PIPELINE_ARTIFACTS_DIR=$(STATE_DIR)/dagster \
	EVAL_PIPELINE_COMPUTE_LOGS_DIR=$(STATE_DIR)/dagster/logs \
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 && \
	export EVAL_PIPELINE_DAGSTER_PG_URL=$$($(BIN)/python -m eval_pipeline.store.database url \
		--state-dir $(STATE_DIR) --database dagster --driver psycopg2 --pooled)

.PHONY: install demo lint test test-unit dev stop-db clean chromium redis-server

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: it resolves to the CPU build on disk; unpinned, pip pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[test]"
	$(BIN)/pip check
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@$(DAGSTER_ENV) && \
	{ DAGSTER=$(BIN)/dagster scripts/run_job.sh retrieval_eval -c eval_pipeline/demo_data/run.yaml; code=$$?; \
	  [ $$code -eq 2 ] || echo "Report: $(CURDIR)/results/results.md"; exit $$code; }

dev: $(STAMP)
	@$(DAGSTER_ENV) && $(BIN)/dagster dev -m definitions

# The UI test drives Debian's Chromium headless; installed here when missing (needs root, as CI has).
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium not installed: the UI test will be skipped"

# The Celery executor's test starts Debian's redis-server as its broker; installed here when missing
# (needs root, as CI has).
redis-server:
	@command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; } \
		|| echo "redis-server not installed: the Celery executor test will be skipped"

# Lint (ruff, mypy: configured in pyproject.toml) and the fast unit lane (stops the run on its
# first failure), then the integration lane; each lane prints its slowest tests. Lanes are markers,
# not folders: tests/unit/<package>/ (one folder per eval_pipeline stage package),
# tests/integration/ and tests/orchestration/ (the Dagster layer, whole-job runs) feed both.
# The integration lane runs on one worker per core (pytest-xdist), a test file to a worker: a
# file's module fixtures (a server, a run its tests read) are made once, and each worker has its
# own session Postgres and temp dir. The longest files go first (tests/conftest.py, LONGEST_FILES).
INTEGRATION_WORKERS ?= auto
# The unit lane on one worker per core too, mypy beside it: 98 s -> 82 s on these 2-core machines
# (a cold mypy cache, as on a clean clone; bench/RESULTS.md section 29).
UNIT_WORKERS ?= auto
RUFF = $(BIN)/ruff check eval_pipeline assets resources definitions.py
lint: $(STAMP)
	$(RUFF)
	$(BIN)/mypy

# mypy runs beside the unit lane; either failing stops `make test` before the integration lane.
# Python writes its bytecode caches during the tests even where the environment says not to (this
# machine sets PYTHONDONTWRITEBYTECODE=1): every test worker otherwise rewrites the asserts of
# every test module again when it collects them (8 of a worker's 19 s of collection), and every
# run process compiles the project again (bench/RESULTS.md section 33). __pycache__ is ignored by git.
test: export PYTHONDONTWRITEBYTECODE :=
test: $(STAMP) chromium redis-server
	$(RUFF)
	@typed=$$(mktemp); $(BIN)/mypy > $$typed 2>&1 & mypy=$$!; \
	$(BIN)/python -m pytest -q -m "not integration" -x --durations=10 -n $(UNIT_WORKERS); unit=$$?; \
	wait $$mypy; mypy_code=$$?; echo "mypy:"; cat $$typed; rm -f $$typed; \
	[ $$unit -eq 0 ] && [ $$mypy_code -eq 0 ]
	$(BIN)/python -m pytest -q -m integration --durations=25 \
		-n $(INTEGRATION_WORKERS) --dist loadfile --no-loadscope-reorder

test-unit: $(STAMP) lint
	$(BIN)/python -m pytest -q -m "not integration" -x --durations=10 -n $(UNIT_WORKERS)

stop-db: $(STAMP)
	$(BIN)/python -m eval_pipeline.store.database stop --state-dir $(STATE_DIR)

clean: stop-db
	rm -rf $(STATE_DIR) results
