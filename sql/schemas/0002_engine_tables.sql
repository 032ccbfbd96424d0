-- depends: 0001_roles_and_networks
--
-- The engine's tables, created once per network schema.
--
-- movement_requests        one row per movement; request_state plus the counters
--                          that let completion be decided without a scan:
--                          open_nodes (nodes not yet COMPLETED/FAILED/SKIPPED) and
--                          failed_nodes. stop_reason records a cancel or an expiry
--                          that waits for in-flight side effects to settle.
-- movement_request_nodes   the DAG's nodes. pending_parents counts parents not yet
--                          COMPLETED; a node becomes READY when it reaches 0.
--                          claim_token is the fencing token: every claim bumps it
--                          and every completion must present the current value.
--                          lease_until bounds a dispatcher's or recovery's claim.
-- movement_plan_edges      parent -> child edges of the DAG.
-- node_intents             one row per dispatch attempt, written by the claim
--                          before any side effect; carries the idempotency key,
--                          then nonce / signed tx hash / external request id.
-- worker_heartbeats        one row per worker instance.
-- callback_outbox          request state changes to deliver to the caller.
-- audit_outbox             every transition, in the transaction that made it.
-- executors                the executor registry (validates plans).
-- executor_health          last health report per executor.
-- lane_baselines           pacing parameters per lane.
-- movement_templates       named plans with {"$param": name} placeholders.
--
-- Lock order everywhere: request before node, node before intent.

SET LOCAL ROLE qtg_owner;

CREATE TYPE qtg.request_state AS ENUM (
    'PENDING_APPROVAL', 'APPROVED', 'EXECUTING', 'COMPLETED', 'FAILED', 'CANCELLED', 'EXPIRED'
);
CREATE TYPE qtg.node_state AS ENUM (
    'PENDING', 'READY', 'SUBMITTING', 'SUBMITTED', 'OBSERVING', 'COMPLETED', 'FAILED', 'UNKNOWN', 'SKIPPED'
);
CREATE TYPE qtg.observe_phase AS ENUM ('pre_baseline', 'at_baseline', 'over_baseline', 'fatal');

SELECT qtg_admin.apply_per_network($ddl$

CREATE TABLE executors (
    executor_key       text PRIMARY KEY CHECK (executor_key ~ '^[a-z][a-z0-9_]{0,62}$'),
    has_side_effect    boolean NOT NULL,
    node_config_schema jsonb NOT NULL CHECK (jsonb_typeof(node_config_schema) = 'object'),
    description        text NOT NULL DEFAULT '',
    registered_at      timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);

CREATE TABLE executor_health (
    executor_key text PRIMARY KEY REFERENCES executors ON DELETE CASCADE,
    status       text NOT NULL CHECK (status IN ('HEALTHY', 'DEGRADED', 'DOWN')),
    detail       jsonb NOT NULL DEFAULT '{}',
    reported_by  text NOT NULL,
    checked_at   timestamptz NOT NULL
);

CREATE TABLE lane_baselines (
    lane                text PRIMARY KEY,
    baseline_seconds    numeric NOT NULL CHECK (baseline_seconds > 0),
    first_poll_fraction numeric NOT NULL DEFAULT 0.7 CHECK (first_poll_fraction > 0 AND first_poll_fraction <= 1),
    poll_fraction       numeric NOT NULL DEFAULT 0.1 CHECK (poll_fraction > 0 AND poll_fraction <= 1),
    over_factor         numeric NOT NULL DEFAULT 2 CHECK (over_factor >= 1),
    fatal_factor        numeric NOT NULL DEFAULT 10,
    min_poll_seconds    numeric NOT NULL DEFAULT 1 CHECK (min_poll_seconds >= 0),
    max_poll_seconds    numeric NOT NULL DEFAULT 300,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (fatal_factor > over_factor),
    CHECK (max_poll_seconds >= min_poll_seconds)
);
INSERT INTO lane_baselines (lane, baseline_seconds) VALUES ('default', 60);

CREATE TABLE movement_templates (
    template_name text PRIMARY KEY CHECK (template_name ~ '^[a-z][a-z0-9_.-]{0,62}$'),
    plan          jsonb NOT NULL CHECK (jsonb_typeof(plan) = 'object'),
    description   text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE movement_requests (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    external_id      text NOT NULL UNIQUE CHECK (length(external_id) BETWEEN 1 AND 200),
    request_state    qtg.request_state NOT NULL,
    template_name    text REFERENCES movement_templates,
    template_params  jsonb,
    plan             jsonb NOT NULL,
    amount           numeric(38, 6) NOT NULL CHECK (amount > 0),
    asset            text NOT NULL CHECK (asset ~ '^[A-Z0-9]{2,16}$'),
    priority         integer NOT NULL DEFAULT 0,
    callback_url     text,
    created_by       text NOT NULL,
    approved_by      text,
    open_nodes       integer NOT NULL CHECK (open_nodes >= 0),
    failed_nodes     integer NOT NULL DEFAULT 0 CHECK (failed_nodes >= 0),
    stop_reason      qtg.request_state CHECK (stop_reason IN ('CANCELLED', 'EXPIRED')),
    stop_detail      text,
    expires_at       timestamptz,
    expiry_waived_at timestamptz,
    created_at       timestamptz NOT NULL,
    approved_at      timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL,
    CHECK ((request_state IN ('COMPLETED', 'FAILED', 'CANCELLED', 'EXPIRED')) = (finished_at IS NOT NULL)),
    CHECK (request_state NOT IN ('COMPLETED', 'FAILED', 'CANCELLED', 'EXPIRED') OR open_nodes = 0)
);
CREATE INDEX movement_requests_approved_idx ON movement_requests (priority DESC, id)
    WHERE request_state = 'APPROVED';
CREATE INDEX movement_requests_expiring_idx ON movement_requests (expires_at)
    WHERE request_state IN ('PENDING_APPROVAL', 'APPROVED', 'EXECUTING')
      AND expires_at IS NOT NULL AND stop_reason IS NULL AND expiry_waived_at IS NULL;

CREATE TABLE movement_request_nodes (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id         bigint NOT NULL REFERENCES movement_requests ON DELETE CASCADE,
    node_key           text NOT NULL CHECK (node_key ~ '^[A-Za-z0-9_.-]{1,64}$'),
    executor_key       text NOT NULL REFERENCES executors,
    has_side_effect    boolean NOT NULL,
    node_config        jsonb NOT NULL,
    lane               text NOT NULL,
    node_state         qtg.node_state NOT NULL,
    pending_parents    integer NOT NULL CHECK (pending_parents >= 0),
    priority           integer NOT NULL DEFAULT 0,
    claim_token        bigint NOT NULL DEFAULT 0,
    claimed_by         text,
    claimed_at         timestamptz,
    lease_until        timestamptz,
    not_before         timestamptz,
    submit_attempts    integer NOT NULL DEFAULT 0,
    external_ref       text,
    recovery_attempts  integer NOT NULL DEFAULT 0,
    submitted_at       timestamptz,
    observe_started_at timestamptz,
    next_observe_at    timestamptz,
    observe_phase      qtg.observe_phase,
    observe_count      integer NOT NULL DEFAULT 0,
    last_observed_at   timestamptz,
    evidence           jsonb,
    last_error         text,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    finished_at        timestamptz,
    UNIQUE (request_id, node_key),
    CHECK (node_state <> 'READY' OR pending_parents = 0),
    CHECK ((node_state IN ('COMPLETED', 'FAILED', 'SKIPPED')) = (finished_at IS NOT NULL)),
    CHECK (node_state NOT IN ('SUBMITTED', 'OBSERVING') OR (next_observe_at IS NOT NULL AND observe_started_at IS NOT NULL)),
    CHECK (node_state NOT IN ('SUBMITTING', 'UNKNOWN') OR lease_until IS NOT NULL)
);
-- the dispatcher's claim: READY rows only, so history never enters the scan
CREATE INDEX movement_request_nodes_ready_idx ON movement_request_nodes (priority DESC, id)
    WHERE node_state = 'READY';
-- the observer's candidates
CREATE INDEX movement_request_nodes_observable_idx ON movement_request_nodes (next_observe_at)
    WHERE node_state IN ('SUBMITTED', 'OBSERVING');
-- recovery: UNKNOWN, and SUBMITTING whose lease ran out
CREATE INDEX movement_request_nodes_recoverable_idx ON movement_request_nodes (lease_until)
    WHERE node_state IN ('UNKNOWN', 'SUBMITTING');
CREATE INDEX movement_request_nodes_executor_idx ON movement_request_nodes (executor_key);

CREATE TABLE movement_plan_edges (
    request_id     bigint NOT NULL REFERENCES movement_requests ON DELETE CASCADE,
    parent_node_id bigint NOT NULL REFERENCES movement_request_nodes ON DELETE CASCADE,
    child_node_id  bigint NOT NULL REFERENCES movement_request_nodes ON DELETE CASCADE,
    PRIMARY KEY (parent_node_id, child_node_id),
    CHECK (parent_node_id <> child_node_id)
);
CREATE INDEX movement_plan_edges_child_idx ON movement_plan_edges (child_node_id);
CREATE INDEX movement_plan_edges_request_idx ON movement_plan_edges (request_id);

CREATE TABLE node_intents (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_id             bigint NOT NULL REFERENCES movement_request_nodes ON DELETE CASCADE,
    claim_token         bigint NOT NULL,
    idempotency_key     text NOT NULL UNIQUE,
    claimed_by          text NOT NULL,
    intent_state        text NOT NULL CHECK (intent_state IN ('CLAIMED', 'PREPARED', 'SUBMITTED', 'FAILED', 'ABANDONED')),
    nonce               bigint,
    signed_tx_hash      text,
    signed_tx_hashes    text[] NOT NULL DEFAULT '{}',
    external_request_id text,
    prepared_payload    jsonb,
    external_ref        text,
    created_at          timestamptz NOT NULL,
    prepared_at         timestamptz,
    finished_at         timestamptz,
    UNIQUE (node_id, claim_token)
);

CREATE TABLE worker_heartbeats (
    worker_name               text NOT NULL,
    instance_id               text NOT NULL,
    tier                      text NOT NULL CHECK (tier IN ('core', 'sidecar')),
    expected_interval_seconds numeric NOT NULL CHECK (expected_interval_seconds > 0),
    live                      boolean NOT NULL,
    host                      text,
    pid                       integer,
    started_at                timestamptz NOT NULL,
    last_tick_at              timestamptz NOT NULL,
    ticks                     bigint NOT NULL DEFAULT 0,
    last_processed            integer NOT NULL DEFAULT 0,
    consecutive_errors        integer NOT NULL DEFAULT 0,
    last_error                text,
    PRIMARY KEY (worker_name, instance_id)
);

CREATE TABLE callback_outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id      bigint NOT NULL REFERENCES movement_requests ON DELETE CASCADE,
    event_type      text NOT NULL,
    idempotency_key text NOT NULL UNIQUE,
    target_url      text,
    payload         jsonb NOT NULL,
    delivery_state  text NOT NULL DEFAULT 'PENDING' CHECK (delivery_state IN ('PENDING', 'SENT', 'DEAD', 'NO_TARGET')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    created_at      timestamptz NOT NULL,
    sent_at         timestamptz
);
CREATE INDEX callback_outbox_due_idx ON callback_outbox (next_attempt_at) WHERE delivery_state = 'PENDING';
CREATE INDEX callback_outbox_request_idx ON callback_outbox (request_id);

CREATE TABLE audit_outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at timestamptz NOT NULL,
    actor       text NOT NULL,
    entity      text NOT NULL CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane')),
    entity_id   text NOT NULL,
    request_id  bigint,
    action      text NOT NULL,
    from_state  text,
    to_state    text,
    detail      jsonb NOT NULL DEFAULT '{}',
    promoted_at timestamptz
);
CREATE INDEX audit_outbox_unpromoted_idx ON audit_outbox (id) WHERE promoted_at IS NULL;
CREATE INDEX audit_outbox_request_idx ON audit_outbox (request_id) WHERE request_id IS NOT NULL;

$ddl$);
