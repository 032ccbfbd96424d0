"""A comparable snapshot of the QTG part of a database's catalog.

snapshot(conn) reads tables, columns, constraints, indexes, sequences, types,
functions, views, triggers, owners, grants and comments of the QTG schemas, with
no OIDs or database names in it, so two databases built different ways compare
with ==. diff(a, b) lists what differs, for assertion messages.
"""

from __future__ import annotations

from typing import Any

import psycopg

# every schema but the system ones and public (where yoyo keeps its bookkeeping)
_OUR_SCHEMAS = """
    SELECT nspname FROM pg_namespace
    WHERE nspname NOT IN ('public', 'information_schema')
      AND nspname !~ '^pg_' ORDER BY 1"""

Snapshot = dict[str, list[tuple[Any, ...]]]

_QUERIES: dict[str, str] = {
    "schemas": """
        SELECT n.nspname, pg_get_userbyid(n.nspowner), n.nspacl::text
        FROM pg_namespace n WHERE n.nspname = ANY(%(s)s)""",
    "relations": """
        SELECT n.nspname, c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relacl::text,
               c.relpersistence, c.relrowsecurity, obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%(s)s) AND c.relkind NOT IN ('i', 'I')""",
    "columns": """
        -- the column's place among the live ones: a column dropped by a
        -- rollback leaves a hole in attnum that no query can see
        SELECT n.nspname, c.relname,
               row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum), a.attname,
               format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
               co.collname, a.attacl::text, col_description(c.oid, a.attnum)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
        WHERE n.nspname = ANY(%(s)s) AND a.attnum > 0 AND NOT a.attisdropped
          AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')""",
    "constraints": """
        SELECT n.nspname, coalesce(c.relname, t.typname), k.conname, k.contype,
               pg_get_constraintdef(k.oid), k.condeferrable, k.condeferred
        FROM pg_constraint k
        JOIN pg_namespace n ON n.oid = k.connamespace
        LEFT JOIN pg_class c ON c.oid = k.conrelid
        LEFT JOIN pg_type t ON t.oid = k.contypid
        WHERE n.nspname = ANY(%(s)s)""",
    "indexes": """
        SELECT schemaname, tablename, indexname, indexdef
        FROM pg_indexes WHERE schemaname = ANY(%(s)s)""",
    "sequences": """
        SELECT schemaname, sequencename, sequenceowner, data_type::text, start_value,
               min_value, max_value, increment_by, cycle, cache_size
        FROM pg_sequences WHERE schemaname = ANY(%(s)s)""",
    "types": """
        SELECT n.nspname, t.typname, t.typtype, pg_get_userbyid(t.typowner),
               (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
                FROM pg_enum e WHERE e.enumtypid = t.oid),
               CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) END,
               t.typacl::text
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        LEFT JOIN pg_class c ON c.oid = t.typrelid
        WHERE n.nspname = ANY(%(s)s)
          AND (t.typtype IN ('e', 'd', 'r', 'm') OR (t.typtype = 'c' AND c.relkind = 'c'))""",
    "functions": """
        SELECT n.nspname, p.proname, pg_get_function_identity_arguments(p.oid), p.prokind,
               CASE WHEN p.prokind <> 'a' THEN pg_get_functiondef(p.oid) END,
               pg_get_userbyid(p.proowner), p.proacl::text, obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = ANY(%(s)s)""",
    "views": """
        SELECT n.nspname, c.relname, pg_get_viewdef(c.oid, true)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%(s)s) AND c.relkind IN ('v', 'm')""",
    "triggers": """
        SELECT n.nspname, c.relname, tg.tgname, pg_get_triggerdef(tg.oid), tg.tgenabled
        FROM pg_trigger tg
        JOIN pg_class c ON c.oid = tg.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%(s)s) AND NOT tg.tgisinternal""",
    "policies": """
        SELECT schemaname, tablename, policyname, permissive, roles::text, cmd, qual, with_check
        FROM pg_policies WHERE schemaname = ANY(%(s)s)""",
    "table_grants": """
        SELECT grantor::text, grantee::text, table_schema::text, table_name::text,
               privilege_type::text, is_grantable::text
        FROM information_schema.role_table_grants WHERE table_schema = ANY(%(s)s)""",
    "routine_grants": """
        SELECT grantor::text, grantee::text, routine_schema::text, routine_name::text,
               privilege_type::text, is_grantable::text
        FROM information_schema.routine_privileges WHERE routine_schema = ANY(%(s)s)""",
    "default_acls": """
        SELECT pg_get_userbyid(d.defaclrole), n.nspname, d.defaclobjtype, d.defaclacl::text
        FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace
        WHERE n.nspname = ANY(%(s)s) OR d.defaclnamespace = 0""",
}


def snapshot(conn: psycopg.Connection[Any], schemas: tuple[str, ...] | None = None) -> Snapshot:
    """The catalog of ``schemas`` (default: all but system schemas and public) as sorted
    rows per section; the "schemas" section lists the schemas themselves."""
    out: Snapshot = {}
    with conn.transaction():
        # catalog functions qualify names by visibility: make nothing of ours visible
        conn.execute("SET LOCAL search_path = pg_catalog")
        if schemas is None:
            schemas = tuple(str(r[0]) for r in conn.execute(_OUR_SCHEMAS).fetchall())
        for section, query in _QUERIES.items():
            rows = conn.execute(query, {"s": list(schemas)}).fetchall()
            out[section] = sorted((tuple(r) for r in rows), key=repr)
    return out


def diff(a: Snapshot, b: Snapshot) -> list[str]:
    """Human-readable differences between two snapshots (empty when equal)."""
    lines: list[str] = []
    for section in sorted(set(a) | set(b)):
        ra = {repr(r) for r in a.get(section, [])}
        rb = {repr(r) for r in b.get(section, [])}
        lines += [f"{section}: only in first:  {r}" for r in sorted(ra - rb)]
        lines += [f"{section}: only in second: {r}" for r in sorted(rb - ra)]
    return lines
