-- proposal_reject: reject_proposal as a procedure, for CALL in psql:
-- PROPOSED -> REJECTED, with a reason; any operator, the proposer too.
--   CALL proposal_reject(4, 'the baseline is too short for mainnet');
-- Answers the proposal's state in the INOUT parameter proposal_state. The
-- rules, the refusals and the writes are reject_proposal's.
CREATE OR REPLACE PROCEDURE proposal_reject(
    p_proposal_id bigint,
    p_reason      text,
    INOUT proposal_state qtg.proposal_state DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT reject_proposal(p_proposal_id, p_reason);
$$;
