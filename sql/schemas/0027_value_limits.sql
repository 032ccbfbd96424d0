-- depends: 0025_audit_log
--
-- Value limits and breakers, enforced inside the dispatcher's claim
-- (claim_ready_nodes asks limit_holds which of its candidates would break one;
-- those stay READY, their attempts untouched, and limit_held_nodes says why).
--
-- value_limits   per scope: a lane, a venue (an executor: cctp_burn, ccip,
--                bybit_withdraw, ...) or the whole network ('network', '*'):
--                the USDC its side-effect nodes may have in flight at once
--                (SUBMITTING, SUBMITTED, OBSERVING, UNKNOWN), start in a UTC
--                day, and move in one movement; and when its breaker trips
--                (trip_after_failures FAILED nodes within trip_window_seconds).
--                NULL: no such limit. The admin sets them (set_value_limit).
-- value_usage    USDC started per scope and UTC day, counted by the claim for
--                the scopes that have a daily cap (counted when the node is
--                claimed, so a node refused before its side effect still
--                counts: the cap errs on the safe side).
-- breakers       a tripped breaker per lane or venue stops its claims until two
--                different operators reset it (reset_breaker): the first asks,
--                the second resets. Tripped by repeated failures (finish_nodes)
--                or by a drift alert.
-- The FAILED nodes get an index of their own (few rows: the failure count a
-- breaker reads).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE value_limits (
    scope               text NOT NULL CHECK (scope IN ('lane', 'venue', 'network')),
    name                text NOT NULL CHECK (name ~ '^[A-Za-z0-9_.*-]{1,64}$'),
    max_in_flight       numeric CHECK (max_in_flight > 0 AND max_in_flight < 1e15),
    max_per_day         numeric CHECK (max_per_day > 0 AND max_per_day < 1e15),
    max_per_movement    numeric CHECK (max_per_movement > 0 AND max_per_movement < 1e15),
    trip_after_failures integer CHECK (trip_after_failures BETWEEN 1 AND 100000),
    trip_window_seconds numeric NOT NULL DEFAULT 3600 CHECK (trip_window_seconds > 0 AND trip_window_seconds <= 2592000),
    updated_by          text NOT NULL,
    updated_at          timestamptz NOT NULL,
    PRIMARY KEY (scope, name),
    CHECK ((scope = 'network') = (name = '*')),
    CHECK (scope <> 'network' OR trip_after_failures IS NULL)
);

CREATE TABLE value_usage (
    scope   text NOT NULL,
    name    text NOT NULL,
    day     date NOT NULL,
    started numeric NOT NULL CHECK (started >= 0),
    PRIMARY KEY (scope, name, day)
);

CREATE TABLE breakers (
    scope              text NOT NULL CHECK (scope IN ('lane', 'venue')),
    name               text NOT NULL,
    tripped_at         timestamptz NOT NULL,
    tripped_by         text NOT NULL,
    reason             text NOT NULL,
    reset_requested_by text,
    reset_requested_at timestamptz,
    PRIMARY KEY (scope, name)
);

CREATE INDEX movement_request_nodes_failed_idx ON movement_request_nodes (finished_at)
    WHERE node_state = 'FAILED';

ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal', 'chain',
                      'callback', 'callback_target', 'limit', 'breaker'));
$ddl$);
