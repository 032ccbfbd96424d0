-- depends: 0052_routine_grants
--
-- ccip_lanes: each CCIP lane (a source chain to a destination chain) as the
-- engine may send on it, set by the admin (upsert_ccip_lane) and read by
-- ccip_send_route, so a runner never takes a ramp, a version or a fee rule
-- from anything but the registry:
--   version         the CCIP version of the lane's ramps, whose events the
--                   observer reads: '1.5' (the lane's own EVM2EVMOnRamp and
--                   EVM2EVMOffRamp: CCIPSendRequested, ExecutionStateChanged
--                   by sequence number) or '1.6' (the chains' OnRamp and
--                   OffRamp, shared by every lane: CCIPMessageSent,
--                   ExecutionStateChanged by source and sequence number);
--                   a lane of another version is not recorded, so nothing is
--                   sent on it
--   onramp, offramp the OnRamp on the source chain, the OffRamp on the
--                   destination chain
--   token_data      what the destination's token pool needs with a message
--                   executed by hand: 'cctp' (USDC through Chainlink's USDC
--                   pool: the burn's CCTP message and attestation) or 'none'
--   fee_margin_bps  what a send pays over the Router's quote, in basis
--                   points, so a fee risen between the quote and the send's
--                   block is still paid (the Router keeps any overpayment)
--   max_fee_wei     the most one send may pay, margin included
-- Nothing is seeded: a deployment's CCIP sends are refused (QT014) until its
-- lanes are recorded (`qtg chains up` records the local chains' lanes).

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
CREATE TABLE ccip_lanes (
    source_chain_key text NOT NULL REFERENCES chains,
    dest_chain_key   text NOT NULL REFERENCES chains,
    version          text NOT NULL CHECK (version IN ('1.5', '1.6')),
    onramp           text NOT NULL CHECK (onramp ~ '^0x[0-9a-f]{40}$'),
    offramp          text NOT NULL CHECK (offramp ~ '^0x[0-9a-f]{40}$'),
    token_data       text NOT NULL CHECK (token_data IN ('none', 'cctp')),
    fee_margin_bps   integer NOT NULL CHECK (fee_margin_bps BETWEEN 0 AND 10000),
    max_fee_wei      numeric NOT NULL CHECK (max_fee_wei > 0 AND max_fee_wei <= 100000000000000000000
                                             AND max_fee_wei = trunc(max_fee_wei)),
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (source_chain_key, dest_chain_key),
    CHECK (source_chain_key <> dest_chain_key)
);
$ddl$);
