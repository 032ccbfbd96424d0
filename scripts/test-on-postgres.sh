#!/usr/bin/env bash
# Runs the test suite against a throw-away cluster of another PostgreSQL
# installation (default: Debian's PostgreSQL 15), to prove the engine works on
# 15 as well as on the embedded 18.
#
#   scripts/test-on-postgres.sh [PG_BIN_DIR] [pytest args...]
#
# The cluster lives in a temp dir, listens on a unix socket only, lets the
# superuser in by trust and every other login by its scram-sha-256 password, and
# is stopped and removed on exit. As root, the server runs as the `postgres`
# system user (PostgreSQL refuses to run as root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PG_BIN="${1:-/usr/lib/postgresql/15/bin}"
shift || true
if [[ ! -x "$PG_BIN/initdb" ]]; then
    echo "no PostgreSQL server in $PG_BIN (initdb missing); skipping" >&2
    exit 0
fi

# in memory where there is room, as the tests' own servers (tests/tmpdir.py)
WORK="$(mktemp -d "$(.venv/bin/python tests/tmpdir.py)/qtg-pgtest.XXXXXX")"
as_owner() { "$@"; }
if [[ "$(id -u)" == 0 ]]; then
    OWNER="${QTG_PG_OWNER:-postgres}"
    chown "$OWNER" "$WORK"
    chmod 755 "$WORK"
    as_owner() { runuser -u "$OWNER" -- "$@"; }
fi
cleanup() {
    as_owner "$PG_BIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

as_owner "$PG_BIN/initdb" -D "$WORK/data" -U postgres --auth=trust --encoding=UTF8 >/dev/null
# the superuser in without a password (the tests' admin connections), every other
# login by its scram password, as on the embedded server: a wrong password is refused
printf 'local all postgres trust\nlocal all all scram-sha-256\n' | as_owner tee "$WORK/data/pg_hba.conf" >/dev/null
as_owner "$PG_BIN/pg_ctl" -D "$WORK/data" -l "$WORK/server.log" -w \
    -o "-c listen_addresses='' -c unix_socket_directories='$WORK' -c max_connections=200 -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_wal_size=256MB" \
    start >/dev/null
VERSION="$("$PG_BIN/postgres" --version)"
echo "testing against $VERSION (socket $WORK)"

export QTG_TEST_DSN="postgresql://postgres@/postgres?host=$WORK"
.venv/bin/pytest -q "$@"
