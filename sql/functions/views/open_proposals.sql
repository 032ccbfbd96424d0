-- open_proposals: the configuration proposals waiting for a second operator:
-- what they change (the subject's value when proposed, the proposed value,
-- and the settings that differ: {"setting": {"from": ..., "to": ...}}), who
-- proposed them and when, and when they expire. A proposal past its expiry
-- is no longer open (approve_proposal refuses it).
CREATE OR REPLACE VIEW open_proposals AS
SELECT p.id AS proposal_id,
       p.kind,
       p.subject,
       p.before_value,
       p.proposed_value,
       (SELECT jsonb_object_agg(a.key, jsonb_build_object('from', p.before_value -> a.key, 'to', a.value))
          FROM jsonb_each(p.proposed_value) a
         WHERE p.before_value -> a.key IS DISTINCT FROM a.value) AS changes,
       p.proposed_by,
       p.proposed_at,
       p.expires_at,
       p.expires_at - clock() AS expires_in,
       p.supersedes
  FROM config_proposals p
 WHERE p.proposal_state = 'PROPOSED'
   AND p.expires_at > clock();
