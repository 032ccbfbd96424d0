-- proposal_approve: approve_proposal as a procedure, for CALL in psql:
-- PROPOSED -> APPLIED, the change applied, by another login than the proposer's.
--   CALL proposal_approve(4);
-- Answers the proposal's state in the INOUT parameter proposal_state: a
-- self-approval is approve_proposal's QT022 WARNING (audited) and answers
-- PROPOSED. The rules, the refusals and the writes are approve_proposal's.
CREATE OR REPLACE PROCEDURE proposal_approve(
    p_proposal_id bigint,
    INOUT proposal_state qtg.proposal_state DEFAULT NULL
)
LANGUAGE sql
AS $$
    SELECT approve_proposal(p_proposal_id);
$$;
