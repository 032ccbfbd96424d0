-- depends: 0055_upgrade_in_flight_guard
--
-- qtg.proposal_kind gains 'registry': a change to an entry of the chain
-- registry that exists already (a chain, a token, a protocol row, a CCIP
-- lane, an exchange venue), as `qtg registry load` makes one from the address
-- book. The admin's login proposes it (propose_registry_change) and a second
-- login, an operator's, applies it by approving it (approve_proposal, through
-- the entry's own upsert, in the same transaction): what the registry says is
-- where money is sent, and a change to it takes two people, like every other
-- configuration change. The subject names the entry (chain/KEY,
-- token/CHAIN/SYMBOL, protocol/CHAIN/PROTOCOL, ccip_lane/SOURCE/DEST,
-- venue/KEY); the value is its row's values (registry_entry_value).

SET LOCAL ROLE qtg_owner;

ALTER TYPE qtg.proposal_kind ADD VALUE IF NOT EXISTS 'registry';
