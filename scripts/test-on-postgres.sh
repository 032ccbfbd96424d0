#!/usr/bin/env bash
# Runs the test suite against throw-away clusters of another PostgreSQL
# installation (default: Debian's PostgreSQL 15), to prove the engine works on
# 15 as well as on the embedded 18.
#
#   scripts/test-on-postgres.sh [PG_BIN_DIR] [pytest args...]
#
# Each pytest process (each pytest-xdist worker: pass -n N) starts its own
# cluster of that installation (tests/conftest.py, QTG_TEST_PG_BIN), in a temp
# dir, listening on a unix socket only, letting the superuser in by trust and
# every other login by its scram-sha-256 password; it is stopped and removed at
# the end. As root, the server runs as the `postgres` system user (PostgreSQL
# refuses to run as root; QTG_PG_OWNER names another).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PG_BIN="${1:-/usr/lib/postgresql/15/bin}"
shift || true
if [[ ! -x "$PG_BIN/initdb" ]]; then
    echo "no PostgreSQL server in $PG_BIN (initdb missing); skipping" >&2
    exit 0
fi

echo "testing against $("$PG_BIN/postgres" --version)"
export QTG_TEST_PG_BIN="$PG_BIN"
unset QTG_TEST_DSN
.venv/bin/pytest -q "$@"
