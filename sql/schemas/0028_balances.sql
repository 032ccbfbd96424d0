-- depends: 0027_value_limits
--
-- Balances and drift: what the treasury holds, read from the outside, against
-- what the engine's own records say it should hold.
--
-- balance_settings      one row per network, the admin's (set_balance_settings):
--                       drift_threshold   how far (USDC) the unexplained change of an
--                                         account may be from zero before it alerts
--                       venue_withdraw_fee_cap  the most an exchange withdrawal may
--                                         take from the venue above its amount
--                       max_balance       a reported balance above this is refused
--                                         as absurd (QT005)
-- balance_reads         one row per read handed out by begin_balance_read: the
--                       database clock taken BEFORE the runner reads anything
--                       (started_at), who read, and when it was recorded
-- balance_snapshots     per account and read: a chain account (chain_key, the
--                       treasury address) or a venue account (venue_key, 'FUND'),
--                       the asset (USDC), the balance (NULL and error set: a failed
--                       read, never a zero), the block it was read at (chains),
--                       read_started_at (the read's) and recorded_at, and
--                       once verify_drift looked at it: verified_at (partial
--                       index: the unverified ones), its outcome and the range
--                       the engine's records expected it in
-- balance_baselines     per account the snapshot the expectation starts from: its
--                       first successful one, or the one an acknowledged alert
--                       re-baselined it to
-- balance_drift_alerts  an account whose balance the engine's records do not
--                       explain: the expected range and the actual balance, the
--                       baseline, the first and the latest snapshot that showed it,
--                       the breakers it tripped; OPEN until two operators
--                       acknowledge it (one OPEN alert per account: unique index)
--
-- verify_drift reads the side-effect nodes not finished before an account's
-- baseline was read: movement_request_nodes_balance_idx (finished_at of the
-- side-effect nodes; NULL while open) keeps that from reading all history.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE balance_settings (
    id                     boolean PRIMARY KEY DEFAULT true CHECK (id),
    drift_threshold        numeric NOT NULL DEFAULT 0.01 CHECK (drift_threshold >= 0 AND drift_threshold < 1e12),
    venue_withdraw_fee_cap numeric NOT NULL DEFAULT 1 CHECK (venue_withdraw_fee_cap >= 0 AND venue_withdraw_fee_cap < 1e12),
    max_balance            numeric NOT NULL DEFAULT 1e15 CHECK (max_balance > 0 AND max_balance < 1e30),
    updated_by             text,
    updated_at             timestamptz
);
INSERT INTO balance_settings DEFAULT VALUES;

CREATE TABLE balance_reads (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at  timestamptz NOT NULL,
    started_by  text NOT NULL,
    recorded_at timestamptz
);

CREATE TABLE balance_snapshots (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    read_id         bigint NOT NULL REFERENCES balance_reads,
    account_kind    text NOT NULL CHECK (account_kind IN ('chain', 'venue')),
    account_key     text NOT NULL CHECK (account_key ~ '^[a-z][a-z0-9-]{0,62}$'),
    address         text NOT NULL CHECK (address ~ '^0x[0-9a-f]{40}$' OR address = 'FUND'),
    asset           text NOT NULL CHECK (asset ~ '^[A-Za-z0-9.]{1,16}$'),
    balance         numeric CHECK (balance >= 0 AND balance < 1e30),
    block_number    bigint CHECK (block_number >= 0),
    error           text CHECK (length(error) <= 4096),
    read_started_at timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL,
    recorded_by     text NOT NULL,
    verified_at     timestamptz,
    outcome         text CHECK (outcome IN ('FAILED_READ', 'BASELINE', 'BEFORE_BASELINE', 'OK', 'DRIFT')),
    expected_low    numeric,
    expected_high   numeric,
    CHECK ((balance IS NULL) = (error IS NOT NULL)),
    CHECK ((verified_at IS NULL) = (outcome IS NULL)),
    CHECK (account_kind = 'chain' OR block_number IS NULL),
    CHECK ((account_kind = 'venue') = (address = 'FUND')),
    UNIQUE (read_id, account_kind, account_key, address, asset)
);
CREATE INDEX balance_snapshots_account_idx ON balance_snapshots (account_kind, account_key, address, asset, id DESC);
CREATE INDEX balance_snapshots_unverified_idx ON balance_snapshots (id) WHERE verified_at IS NULL;

CREATE TABLE balance_baselines (
    account_kind text NOT NULL,
    account_key  text NOT NULL,
    address      text NOT NULL,
    asset        text NOT NULL,
    snapshot_id  bigint NOT NULL REFERENCES balance_snapshots,
    set_at       timestamptz NOT NULL,
    set_by       text NOT NULL,
    reason       text NOT NULL,
    PRIMARY KEY (account_kind, account_key, address, asset)
);

CREATE TABLE balance_drift_alerts (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_kind         text NOT NULL,
    account_key          text NOT NULL,
    address              text NOT NULL,
    asset                text NOT NULL,
    alert_state          text NOT NULL CHECK (alert_state IN ('OPEN', 'ACKNOWLEDGED')),
    baseline_snapshot_id bigint NOT NULL REFERENCES balance_snapshots,
    first_snapshot_id    bigint NOT NULL REFERENCES balance_snapshots,
    last_snapshot_id     bigint NOT NULL REFERENCES balance_snapshots,
    expected_low         numeric NOT NULL,
    expected_high        numeric NOT NULL,
    actual               numeric NOT NULL,
    raised_at            timestamptz NOT NULL,
    last_seen_at         timestamptz NOT NULL,
    raised_by            text NOT NULL,
    breakers             text[] NOT NULL DEFAULT '{}',
    ack_requested_by     text,
    ack_requested_at     timestamptz,
    acknowledged_by      text,
    acknowledged_at      timestamptz,
    ack_reason           text,
    CHECK ((alert_state = 'ACKNOWLEDGED') = (acknowledged_at IS NOT NULL))
);
CREATE UNIQUE INDEX balance_drift_alerts_open_idx ON balance_drift_alerts (account_kind, account_key, address, asset)
    WHERE alert_state = 'OPEN';

CREATE INDEX movement_request_nodes_balance_idx ON movement_request_nodes (finished_at) WHERE has_side_effect;

ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                      'callback', 'callback_target', 'limit', 'breaker', 'balance'));
$ddl$);
