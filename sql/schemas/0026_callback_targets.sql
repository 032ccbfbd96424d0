-- depends: 0025_audit_log
--
-- Signed callbacks: who may receive them and how they are delivered.
--
-- callback_targets    the registered receivers of a network, set by the admin
--                     (upsert_callback_target). Only a movement whose
--                     callback_url is exactly a registered, enabled target's
--                     url gets a POST; any other row is REFUSED when claimed
--                     and never sent. The signing secret is NOT here: the
--                     target names where the dispatcher finds it
--                     (secret_ref 'env:NAME', a variable of the runner's
--                     environment, or 'file:NAME', a 0600 file in
--                     QTG_CALLBACK_SECRETS_DIR), like the signer ids of the
--                     treasury accounts, so no login reads it from the
--                     database. allow_private lets the target's address be
--                     loopback or private (never link-local or a cloud
--                     metadata address).
-- callback_settings   one row: the delivery rules (max_attempts, max_age_seconds,
--                     backoff_base_seconds, backoff_cap_seconds, lease_seconds);
--                     the admin changes them with an UPDATE.
-- callback_outbox     gains the claim (claim_hash, claimed_by: a claim leases a
--                     row by moving next_attempt_at lease_seconds ahead, so a
--                     dead dispatcher's rows come back), what the last attempt
--                     said (last_attempt_at, last_status), the target that
--                     received it (target_name), dead_at, and the state
--                     REFUSED (no registered target: never sent).
-- audit_outbox        entities 'callback' (dead, refused, replayed) and
--                     'callback_target' (registered or changed). The list also
--                     names 0027_value_limits' 'limit' and 'breaker' (both
--                     migrations follow 0025 and set this one check: in either
--                     order it ends the same).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE callback_targets (
    target_name   text PRIMARY KEY CHECK (target_name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    url           text NOT NULL UNIQUE CHECK (url ~ '^https?://' AND octet_length(url) <= 2048),
    secret_ref    text NOT NULL CHECK (secret_ref ~ '^(env|file):[A-Za-z_][A-Za-z0-9_.-]{0,127}$'),
    allow_private boolean NOT NULL DEFAULT false,
    enabled       boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

CREATE TABLE callback_settings (
    only_row             boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    max_attempts         integer NOT NULL DEFAULT 12 CHECK (max_attempts BETWEEN 1 AND 1000),
    max_age_seconds      numeric NOT NULL DEFAULT 259200
                         CHECK (max_age_seconds > 0 AND max_age_seconds < 'Infinity'),
    backoff_base_seconds numeric NOT NULL DEFAULT 5
                         CHECK (backoff_base_seconds > 0 AND backoff_base_seconds <= 3600),
    backoff_cap_seconds  numeric NOT NULL DEFAULT 3600
                         CHECK (backoff_cap_seconds >= backoff_base_seconds AND backoff_cap_seconds <= 86400),
    lease_seconds        numeric NOT NULL DEFAULT 60 CHECK (lease_seconds BETWEEN 1 AND 3600)
);
INSERT INTO callback_settings DEFAULT VALUES;

ALTER TABLE callback_outbox DROP CONSTRAINT callback_outbox_delivery_state_check;
ALTER TABLE callback_outbox
    ADD CONSTRAINT callback_outbox_delivery_state_check
        CHECK (delivery_state IN ('PENDING', 'SENT', 'DEAD', 'NO_TARGET', 'REFUSED')),
    ADD COLUMN claim_hash      bytea CHECK (length(claim_hash) = 32),
    ADD COLUMN claimed_by      text,
    ADD COLUMN target_name     text,
    ADD COLUMN last_attempt_at timestamptz,
    ADD COLUMN last_status     integer,
    ADD COLUMN dead_at         timestamptz;
ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                      'callback', 'callback_target', 'limit', 'breaker'));
CREATE INDEX callback_outbox_dead_idx ON callback_outbox (id) WHERE delivery_state IN ('DEAD', 'REFUSED');
$ddl$);
