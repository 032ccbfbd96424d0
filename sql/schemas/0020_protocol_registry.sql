-- depends: 0019_evm_closed_nonces
--
-- chain_protocols: what a bridge executor needs to know of a chain beyond the
-- chain registry: its id in the protocol (the CCTP domain, the CCIP chain
-- selector, the LayerZero endpoint id) and the protocol's contracts on it, by
-- name ({"TokenMessengerV2": "0x...", ...}). One row per chain and protocol,
-- set by the admin (upsert_chain_protocol); the route functions read it
-- (chain_protocol), so a runner never takes a contract address from anything
-- but the registry.
--
-- Lane baselines for the protocol lanes, from the real timings (protocols.md):
-- CCTP fast 8-20 s and standard 13-19 min (the attestation included), CCIP
-- 15-25 min, Stargate taxi about a minute and bus until the bus is driven,
-- Bybit withdrawals and deposit credits minutes. An UPDATE (or an approved
-- lane proposal) changes them; tests and the demo scale them to their doubles'
-- time scale.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE chain_protocols (
    chain_key  text NOT NULL REFERENCES chains,
    protocol   text NOT NULL CHECK (protocol IN ('cctp', 'ccip', 'stargate')),
    remote_id  numeric NOT NULL CHECK (remote_id >= 0 AND remote_id < 18446744073709551616 AND remote_id = trunc(remote_id)),
    contracts  jsonb NOT NULL CHECK (jsonb_typeof(contracts) = 'object'),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (chain_key, protocol),
    UNIQUE (protocol, remote_id)
);

INSERT INTO lane_baselines (lane, baseline_seconds, min_poll_seconds, max_poll_seconds, updated_at) VALUES
    ('cctp-fast',       14,   5,  30, now()),
    ('cctp-standard',   960,  5, 300, now()),
    ('ccip',           1200,  5, 300, now()),
    ('stargate-taxi',    60,  5,  60, now()),
    ('stargate-bus',    600,  5, 300, now()),
    ('bybit-withdraw',  300,  5, 120, now()),
    ('bybit-deposit',   600,  5, 300, now())
ON CONFLICT (lane) DO NOTHING;
$ddl$);
