-- depends: 0027_value_limits
--
-- What the HTTP API (qtg api) needs of the schema.
--
-- qtg.proposal_kind      gains 'callback_target': an operator proposes a
--                        receiver of signed callbacks (propose_callback_target,
--                        POST /v1/callback-targets) and a second operator's
--                        approve_proposal registers it through the admin's
--                        upsert_callback_target, in the same transaction. The
--                        subject is the target's name, the value {url,
--                        secret_ref, allow_private, enabled}.
-- qtg.schema_migrations  the migrations applied to this database, as `qtg db
--                        migrate` last recorded them (it rewrites the table
--                        after every migrate, as the admin): /readyz compares
--                        it with the migrations the API's build carries.
--                        Every login may read it; only the owner writes.

SET LOCAL ROLE qtg_owner;

ALTER TYPE qtg.proposal_kind ADD VALUE IF NOT EXISTS 'callback_target';

CREATE TABLE qtg.schema_migrations (
    migration_id text PRIMARY KEY CHECK (migration_id ~ '^[0-9]{4}_[a-z0-9_]+$'),
    recorded_at  timestamptz NOT NULL
);
GRANT SELECT ON qtg.schema_migrations TO PUBLIC;
