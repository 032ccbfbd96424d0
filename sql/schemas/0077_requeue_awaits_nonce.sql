-- depends: 0076_value_counted_per_claim
--
-- Two operators requeue an UNKNOWN node whose transaction they judge can
-- never land, and the next claim signs a fresh one. But signed bytes are
-- valid while their nonce is, for anyone who holds them: the dropped
-- transaction comes back (a mempool kept it, someone who saw it broadcast
-- sends it again), the fresh one waits behind it at the next nonce, and both
-- are mined: the approved amount twice. A requeued node whose call pays
-- each time it is mined now waits, READY but not claimed, until the chain
-- has consumed the abandoned intent's nonce:
--   movement_request_nodes.awaits_nonce_of  the ABANDONED intent whose nonce
--                                           must be consumed first (by the
--                                           reaper's fill, or a transaction
--                                           the engine never recorded:
--                                           record_nonce_closed clears it);
--                                           NULL: the node waits for nothing
-- Taken by the intent's own transaction, the node paid: it stays held, its
-- last_error saying so, for an operator.

SET LOCAL ROLE qtg_owner;

SELECT qtg_admin.apply_per_network($ddl$
ALTER TABLE movement_request_nodes ADD COLUMN awaits_nonce_of bigint;
$ddl$);
