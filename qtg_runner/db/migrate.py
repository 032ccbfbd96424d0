"""Database lifecycle: schema migrations (yoyo) and the re-installed function layer.

migrate(dsn)
  1. applies the versioned migrations in sql/schemas (NNNN_name.sql, each with its
     NNNN_name.rollback.sql) through yoyo, under yoyo's database lock;
  2. re-installs every routine (function or procedure) and view in ONE
     transaction, as qtg_owner: drops those in schema qtg and in every network
     schema (never qtg_admin, never objects that belong to an extension),
     re-creates the installer's own routines in qtg_admin (ADMIN_SCHEMA),
     then runs sql/functions/common/*.sql
     in schema qtg, and for each network in qtg_admin.networks the folders of
     ROUTINE_FOLDERS then views/, in the network's schema;
  3. records the applied migrations' ids in qtg.schema_migrations (/readyz).

The folder a routine's file sits in says who may call it, and is the one source
of truth for it: each file defines the routine it is named after, and the
installer sets every routine's search_path (its network, then qtg) and
PLANNER_SETTINGS, makes the public ones (runner/, operator/) SECURITY DEFINER
with the comment 'access: <caller>' (which qtg_admin.grant_network_privileges
turns into EXECUTE for the network's role, ON ROUTINE: a procedure, which
GRANT ... ON FUNCTION refuses and REVOKE ... ON ALL FUNCTIONS leaves to PUBLIC,
is granted as a function is, 0052_routine_grants), leaves the admin deploy steps
(admin/, comment 'access: admin') and the internal helpers SECURITY INVOKER
with no grant: only the owner and the admin (a member of qtg_owner) may call
them. The routines of
inline/ are internal helpers too, left without a search_path of their own so
that PostgreSQL inlines them (INLINE_FOLDER).

rollback(dsn, count) drops the function layer first (the schema rollbacks drop
types and tables that installed routines depend on), then rolls back the last
`count` applied migrations, newest first. Run migrate() afterwards to install
functions again.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from yoyo import get_backend, read_migrations

log = logging.getLogger("qtg.db")

OWNER_ROLE = "qtg_owner"
COMMON_SCHEMA = "qtg"
_INSTALL_LOCK_KEY = 7_236_001  # pg_advisory_xact_lock key of the function installer
ROUTINE_FOLDERS: dict[str, str | None] = {
    "inline": None,
    "internal": None,
    "admin": "admin",
    "runner": "runner",
    "operator": "operator",
}
"""The folders of sql/functions installed in every network, and who may call their routines."""
PLANNER_SETTINGS = {"random_page_cost": "1.1"}
"""Set on every pinned routine, whatever the server's own settings. The engine's
rows are read by key from memory, where a random page costs about what a
sequential one does; at PostgreSQL's default (4, a disk's seek) the generic
plans of a network with a few thousand nodes -- every new deployment -- read
whole tables where one index probe answers (the completion guard's join on the
node's key: a sequential scan and a hash join, 0.29 ms, against 0.03 ms by
the primary key at 1,000 nodes), and an observation cost twice what it costs
with 100,000 nodes in flight. Large tables plan the same either way."""
ADMIN_SCHEMA = "qtg_admin"
"""The installer's own routines (grant_network_privileges), in sql/functions/qtg_admin/:
re-created in place (CREATE OR REPLACE) on every install, never dropped, and
granted to nobody. A routine there whose signature changes leaves the old one
behind: a migration drops it."""
INLINE_FOLDER = "inline"
"""Pure SQL expressions over their arguments (the audit chain's hash): installed
like internal/ but with no search_path of their own, so that PostgreSQL
inlines them into the statement that calls them instead of running a function
call per row (a pinned search_path forbids inlining). Inlined, their names
resolve under the calling routine's pinned search_path; called on their own,
only the owner may run them. The installer refuses one that is not a single
non-volatile LANGUAGE sql function."""
DEFINER_CALLERS = frozenset({"runner", "operator"})
"""The callers whose routines run as their owner (SECURITY DEFINER) and are granted
to the network's role of that name; admin/ and internal/ routines run as their
caller and are granted to nobody (the admin, a member of qtg_owner, calls them)."""


class MigrationError(RuntimeError):
    """A migration or a function file failed; the message names the file."""


@dataclass(frozen=True)
class MigrateResult:
    applied: list[str] = field(default_factory=list)
    common_routines: int = 0
    routines: dict[str, int] = field(default_factory=dict)  # per network
    views: dict[str, int] = field(default_factory=dict)  # per network


def sql_dir() -> Path:
    """The repository's sql/ tree (the package is installed editable, beside it)."""
    path = Path(__file__).resolve().parent.parent.parent / "sql"
    if not (path / "schemas").is_dir():
        raise MigrationError(
            f"SQL tree not found at {path}; install the project editable: pip install -e ."
        )
    return path


def yoyo_uri(dsn: str) -> str:
    """Turn a libpq DSN (URI or key=value) into yoyo's `postgresql+psycopg://` form.

    Every connection parameter travels in the query string: yoyo hands those to
    psycopg.connect unchanged, so unix socket directories, IPv6 hosts and options
    need no URI quoting of their own.
    """
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise MigrationError(f"invalid database URL: {exc}") from exc
    args = {k: str(v) for k, v in params.items() if v is not None}
    return "postgresql+psycopg:///?" + urlencode(args)


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.sql") if p.is_file())


@contextlib.contextmanager
def _yoyo_output(migration_id: str) -> Iterator[None]:
    """yoyo prints the rows a migration's SELECTs return to stdout: log them instead."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            yield
    finally:
        if buf.getvalue().strip():
            log.debug("event=migration_output migration=%s output=%r", migration_id, buf.getvalue())


def _schema_backend(dsn: str) -> Any:
    return get_backend(yoyo_uri(dsn))


def _each(
    migrations: Sequence[Any],
    step: Callable[[Any], None],
    event: str,
    script: Callable[[Any], Path],
    root: Path,
    after_refusal: Callable[[list[str]], str] = lambda done: "",
) -> list[str]:
    """``step`` (apply or roll back) for each migration in order, each logged as
    ``event``; their ids. A refused one raises MigrationError naming its
    ``script``, with what ``after_refusal`` says of the ones done before it."""
    done: list[str] = []
    for migration in migrations:
        try:
            with _yoyo_output(migration.id):
                step(migration)
        except psycopg.Error as exc:
            raise MigrationError(
                f"{_rel(script(migration), root)}: {exc}{after_refusal(done)}"
            ) from exc
        log.info("event=%s migration=%s", event, migration.id)
        done.append(str(migration.id))
    return done


def migrate(dsn: str, *, sql_root: Path | None = None) -> MigrateResult:
    """Apply pending schema migrations, then re-install all functions and views."""
    root = sql_root or sql_dir()
    backend = _schema_backend(dsn)
    try:
        migrations = read_migrations(str(root / "schemas"))
        with backend.lock():
            pending = backend.to_apply(migrations)
            applied = _each(
                pending, backend.apply_one, "migration_applied", lambda m: Path(m.path), root
            )
            with _yoyo_output("post-apply"):
                backend.run_post_apply(pending)
            result = install_functions(dsn, sql_root=root)
            done = applied_hashes(backend)
            _record_schema(dsn, [str(m.id) for m in migrations if m.hash in done])
    finally:
        backend.connection.close()
    return MigrateResult(
        applied=applied,
        common_routines=result.common_routines,
        routines=result.routines,
        views=result.views,
    )


def install_functions(dsn: str, *, sql_root: Path | None = None) -> MigrateResult:
    """Drop and re-create every function, procedure and view, in one transaction."""
    root = sql_root or sql_dir()
    fn_dir = root / "functions"
    with psycopg.connect(dsn) as conn, conn.transaction():
        networks = _prepare_install(conn)
        _drop_installed(conn, networks)
        _install_admin(conn, fn_dir / ADMIN_SCHEMA, root)
        common = _files(fn_dir / "common")
        _set_search_path(conn, COMMON_SCHEMA)
        for path in common:
            _run_file(conn, path, root, network=None)
        _set_access(
            conn, COMMON_SCHEMA, {path.stem: None for path in common}, "sql/functions/common"
        )
        for net in networks:
            callers: dict[str, str | None] = {}
            inlined: set[str] = set()
            _set_search_path(conn, net, COMMON_SCHEMA)
            for folder, caller in ROUTINE_FOLDERS.items():
                for path in _files(fn_dir / folder):
                    _run_file(conn, path, root, network=net)
                    callers[path.stem] = caller
                    if folder == INLINE_FOLDER:
                        inlined.add(path.stem)
            for path in _files(fn_dir / "views"):
                _run_file(conn, path, root, network=net)
            _set_access(conn, net, callers, "sql/functions", inlined=inlined)
            conn.execute("SELECT qtg_admin.grant_network_privileges(%s)", [net])
            _grant_reader(conn, net)
        conn.execute("SET LOCAL search_path = pg_catalog, pg_temp")
        result = MigrateResult(
            common_routines=_count_routines(conn, COMMON_SCHEMA),
            routines={net: _count_routines(conn, net) for net in networks},
            views={net: _count_views(conn, net) for net in networks},
        )
    for net in networks:
        log.info(
            "event=functions_installed network=%s routines=%d views=%d",
            net,
            result.routines[net],
            result.views[net],
        )
    return result


def applied_hashes(backend: Any) -> set[str]:
    return set(_applied_hashes(backend))


def _record_schema(dsn: str, applied: list[str]) -> None:
    """Write the applied migrations' ids to qtg.schema_migrations (from
    0029_http_api on), which every login may read: /readyz compares them with
    the build's."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        if conn.execute("SELECT to_regclass('qtg.schema_migrations')").fetchone() == (None,):
            return
        conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER_ROLE)))
        conn.execute("DELETE FROM qtg.schema_migrations")
        conn.execute(
            "INSERT INTO qtg.schema_migrations (migration_id, recorded_at)"
            " SELECT unnest(%s::text[]), now()",
            [applied],
        )


def _install_admin(conn: psycopg.Connection[Any], folder: Path, root: Path) -> None:
    """Re-create the installer's routines in qtg_admin (ADMIN_SCHEMA), each named
    after its file, and take from PUBLIC the EXECUTE a new routine gives it."""
    for path in _files(folder):
        _run_file(conn, path, root, network=None)
        signatures = conn.execute(
            """SELECT p.oid::regprocedure::text
                 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = %s AND p.proname = %s""",
            [ADMIN_SCHEMA, path.stem],
        ).fetchall()
        if not signatures:
            raise MigrationError(f"{_rel(path, root)}: no routine {ADMIN_SCHEMA}.{path.stem}")
        for (signature,) in signatures:
            # from the catalog, already quoted by regprocedure
            conn.execute(sql.SQL("REVOKE ALL ON ROUTINE {} FROM PUBLIC").format(sql.SQL(signature)))


def _set_search_path(conn: psycopg.Connection[Any], *schemas: str) -> None:
    conn.execute(
        sql.SQL("SET LOCAL search_path = {}, pg_temp").format(
            sql.SQL(", ").join(sql.Identifier(s) for s in schemas)
        )
    )


def _set_access(
    conn: psycopg.Connection[Any],
    schema: str,
    callers: dict[str, str | None],
    where: str,
    *,
    inlined: AbstractSet[str] = frozenset(),
) -> None:
    """Pin each routine of ``schema`` to its schemas and give it the access of
    its folder (``callers``: file stem -> caller, None for internal); the
    routines of ``inlined`` keep no search_path (INLINE_FOLDER)."""
    path = [schema] if schema == COMMON_SCHEMA else [schema, COMMON_SCHEMA]
    routines = conn.execute(
        """SELECT p.proname, p.oid::regprocedure::text,
                  l.lanname = 'sql' AND p.prokind = 'f' AND NOT p.proretset
                  AND p.provolatile <> 'v'
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             JOIN pg_language l ON l.oid = p.prolang
            WHERE n.nspname = %s ORDER BY 1, 2""",
        [schema],
    ).fetchall()
    named = {name for name, _, _ in routines}
    missing = sorted(set(callers) - named)
    if missing:
        raise MigrationError(f"{where}: no routine named after the file {missing[0]}.sql")
    for name, signature, expression in routines:
        if name not in callers:
            raise MigrationError(
                f"{where}: routine {signature} is not named after the file that defines it"
            )
        caller = callers[name]
        routine = sql.SQL(signature)  # from the catalog, already quoted by regprocedure
        actions: list[sql.Composable] = []
        if name in inlined:
            if not expression:
                raise MigrationError(
                    f"{where}/{INLINE_FOLDER}: routine {signature} is not a single"
                    " non-volatile LANGUAGE sql function; only those are left unpinned"
                    " to be inlined (move it to internal/)"
                )
            actions.append(sql.SQL("RESET search_path"))
        else:
            actions.append(
                sql.SQL("SET search_path = {}, pg_temp").format(
                    sql.SQL(", ").join(sql.Identifier(s) for s in path)
                )
            )
            actions.extend(
                sql.SQL("SET {} = {}").format(sql.Identifier(setting), sql.Literal(value))
                for setting, value in PLANNER_SETTINGS.items()
            )
        actions.append(
            sql.SQL("SECURITY DEFINER" if caller in DEFINER_CALLERS else "SECURITY INVOKER")
        )
        # one round trip a routine: its actions in one ALTER, and its comment
        conn.execute(
            sql.SQL("ALTER ROUTINE {} {}; COMMENT ON ROUTINE {} IS {}").format(
                routine,
                sql.SQL(" ").join(actions),
                routine,
                sql.Literal(None if caller is None else f"access: {caller}"),
            )
        )


def _grant_reader(conn: psycopg.Connection[Any], network: str) -> None:
    """The network's read-only role (qtg_<network>_reader) may read every table
    and view of its schema, and call the clock the views read."""
    reader = sql.Identifier(f"qtg_{network}_reader")
    schema = sql.Identifier(network)
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {}, qtg TO {}").format(schema, reader))
    conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(schema, reader))
    conn.execute(sql.SQL("GRANT EXECUTE ON FUNCTION qtg.clock() TO {}").format(reader))
    conn.execute(sql.SQL("GRANT SELECT ON qtg.test_database TO {}").format(reader))


def mark_test_database(dsn: str, *, marked: bool = True) -> None:
    """Mark (or unmark) the database as a test database: only there does
    qtg.clock() honour a session's pinned clock (SET qtg.now). The mark is a
    row only the owner may write (qtg.test_database)."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        if conn.execute("SELECT to_regclass('qtg.test_database')").fetchone() == (None,):
            raise MigrationError("schema not migrated (no qtg.test_database): run qtg db migrate")
        conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER_ROLE)))
        if marked:
            conn.execute("INSERT INTO qtg.test_database DEFAULT VALUES ON CONFLICT DO NOTHING")
        else:
            conn.execute("DELETE FROM qtg.test_database")


def drop_installed(dsn: str) -> None:
    """Drop the re-installable layer (functions, procedures, views) in one transaction."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        networks = _prepare_install(conn)
        _drop_installed(conn, networks)


def _prepare_install(conn: psycopg.Connection[Any]) -> list[str]:
    """Lock out concurrent installers, become qtg_owner, return the networks."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", [_INSTALL_LOCK_KEY])
    if conn.execute("SELECT to_regclass('qtg_admin.networks')").fetchone() == (None,):
        raise MigrationError("schema not migrated: qtg_admin.networks does not exist")
    conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(OWNER_ROLE)))
    conn.execute("SET LOCAL check_function_bodies = off")
    # fully qualified names from regprocedure / format() below
    conn.execute("SET LOCAL search_path = pg_catalog, pg_temp")
    rows = conn.execute("SELECT network_name FROM qtg_admin.networks ORDER BY 1").fetchall()
    return [str(r[0]) for r in rows]


def _drop_installed(conn: psycopg.Connection[Any], networks: list[str]) -> None:
    """Drop views in the network schemas, then routines in them and in qtg.

    One DROP statement per kind, so objects that depend on each other inside the
    set go together; anything outside the set that depends on them (a trigger, a
    column default) makes the drop fail loudly instead of being cascaded away.
    """
    conn.execute("SET LOCAL search_path = pg_catalog, pg_temp")
    not_extension = """
        NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = %(catalog)s::regclass AND d.objid = o.oid
                      AND d.deptype = 'e')"""
    views = conn.execute(
        f"""SELECT format('%%I.%%I', n.nspname, o.relname)
            FROM pg_class o JOIN pg_namespace n ON n.oid = o.relnamespace
            WHERE n.nspname = ANY(%(schemas)s) AND o.relkind = 'v' AND {not_extension}
            ORDER BY 1""",
        {"schemas": networks, "catalog": "pg_class"},
    ).fetchall()
    routines = conn.execute(
        f"""SELECT o.oid::regprocedure::text
            FROM pg_proc o JOIN pg_namespace n ON n.oid = o.pronamespace
            WHERE n.nspname = ANY(%(schemas)s) AND {not_extension}
            ORDER BY 1""",
        {"schemas": [*networks, COMMON_SCHEMA], "catalog": "pg_proc"},
    ).fetchall()
    # the names come from the catalog, already quoted by format(%I) / regprocedure
    try:
        if views:
            conn.execute(_drop("VIEW", [str(r[0]) for r in views]))
        if routines:
            conn.execute(_drop("ROUTINE", [str(r[0]) for r in routines]))
    except psycopg.Error as exc:
        raise MigrationError(f"dropping the installed functions and views: {exc}") from exc


def _drop(kind: str, names: list[str]) -> sql.Composed:
    return sql.SQL("DROP {} {}").format(
        sql.SQL(kind),  # a fixed keyword
        sql.SQL(", ").join(sql.SQL(n) for n in names),
    )


def _run_file(
    conn: psycopg.Connection[Any], path: Path, root: Path, *, network: str | None
) -> None:
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return
    try:
        # no parameters: psycopg sends the whole multi-statement file as one simple query
        conn.execute(text.encode("utf-8"))
    except psycopg.Error as exc:
        where = f" (network {network})" if network else ""
        raise MigrationError(f"{_rel(path, root)}{where}: {exc}") from exc


def _count_routines(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(
        """SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = %s""",
        [schema],
    ).fetchone()
    return int(row[0]) if row else 0


def _count_views(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(
        """SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relkind = 'v'""",
        [schema],
    ).fetchone()
    return int(row[0]) if row else 0


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path("sql") / path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def applied_migrations(dsn: str) -> list[str]:
    """Ids of the applied schema migrations, oldest first."""
    backend = _schema_backend(dsn)
    try:
        migrations = read_migrations(str(sql_dir() / "schemas"))
        by_hash = {m.hash: str(m.id) for m in migrations}
        return [by_hash.get(h, f"<unknown {h[:12]}>") for h in _applied_hashes(backend)]
    finally:
        backend.connection.close()


def _applied_hashes(backend: Any) -> list[str]:
    return [str(h) for h in backend.get_applied_migration_hashes()]


def rollback(dsn: str, count: int = 1, *, sql_root: Path | None = None) -> list[str]:
    """Roll back the last ``count`` applied migrations, newest first; return their ids.

    Drops the installed functions and views first. Run migrate() to install them again.
    When the first of them is refused (its rollback script raises), nothing is
    rolled back and the functions and views are installed again; a later one
    refused leaves the ones before it rolled back, and says so.
    """
    if count < 1:
        raise MigrationError("rollback count must be at least 1")
    root = sql_root or sql_dir()
    backend = _schema_backend(dsn)
    try:
        migrations = read_migrations(str(root / "schemas"))
        by_hash = {m.hash: m for m in migrations}
        with backend.lock():
            newest_first = list(reversed(_applied_hashes(backend)))[:count]
            unknown = [h for h in newest_first if h not in by_hash]
            if unknown:
                raise MigrationError(
                    f"cannot roll back: {len(unknown)} applied migration(s) have no file "
                    f"in {root / 'schemas'}"
                )
            targets = [by_hash[h] for h in newest_first]
            if targets:
                drop_installed(dsn)
            done = _each(
                targets,
                backend.rollback_one,
                "migration_rolled_back",
                lambda m: Path(m.path).with_suffix(".rollback.sql"),
                root,
                lambda done: _after_refusal(dsn, root, done),
            )
    finally:
        backend.connection.close()
    return done


def _after_refusal(dsn: str, root: Path, done: list[str]) -> str:
    """What a refused rollback left, for its message. When it was the first one,
    the schema is as it was: the functions and views are installed again."""
    if done:
        return (
            f"\nrolled back before it: {', '.join(done)}; the functions and views are not"
            " installed: `qtg db migrate` applies those again and installs them"
        )
    try:
        install_functions(dsn, sql_root=root)
    except (psycopg.Error, MigrationError) as exc:
        return (
            f"\nthe functions and views could not be installed again ({exc}): run `qtg db migrate`"
        )
    return "\nnothing was rolled back"


def rollback_all(dsn: str, *, sql_root: Path | None = None) -> list[str]:
    """Roll back every applied migration; return their ids, newest first."""
    backend = _schema_backend(dsn)
    try:
        n = len(_applied_hashes(backend))
    finally:
        backend.connection.close()
    return rollback(dsn, n, sql_root=sql_root) if n else []
