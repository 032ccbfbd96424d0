SET LOCAL ROLE qtg_owner;

DROP TABLE qtg.claim_proof_key;
