-- depends: 0002_engine_tables
--
-- The simulated outside world of the `sim` executor: one row per side effect
-- it performed, keyed by the engine's intent idempotency key, so a repeated
-- submit is recognised, recovery finds real evidence, and tests can count
-- duplicates. It stands for a chain or an exchange: the engine's procedures
-- never read it, and runners write it directly (it is not engine state).

CREATE SCHEMA qtg_sim AUTHORIZATION qtg_owner;

CREATE TABLE qtg_sim.side_effects (
    network          text NOT NULL,
    idempotency_key  text NOT NULL,
    node_id          bigint NOT NULL,
    lane             text NOT NULL,
    amount           numeric(38, 6) NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('COMPLETED', 'FAILED')),
    hidden           boolean NOT NULL DEFAULT false,
    submit_count     integer NOT NULL DEFAULT 1,
    submitted_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    completes_at     timestamptz NOT NULL,
    PRIMARY KEY (network, idempotency_key)
);
CREATE INDEX side_effects_node_idx ON qtg_sim.side_effects (network, node_id);
ALTER TABLE qtg_sim.side_effects OWNER TO qtg_owner;

-- each network's runner sees and writes only its own network's rows
ALTER TABLE qtg_sim.side_effects ENABLE ROW LEVEL SECURITY;
CREATE POLICY side_effects_own_network ON qtg_sim.side_effects
    USING (current_user = 'qtg_' || network || '_runner')
    WITH CHECK (current_user = 'qtg_' || network || '_runner');

GRANT USAGE ON SCHEMA qtg_sim TO qtg_mainnet_runner, qtg_testnet_runner;
GRANT SELECT, INSERT, UPDATE ON qtg_sim.side_effects TO qtg_mainnet_runner, qtg_testnet_runner;
