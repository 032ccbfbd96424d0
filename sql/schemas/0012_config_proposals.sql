-- depends: 0010_heartbeat_interval
--
-- Configuration is four-eyes: lane pacing, templates and an executor's
-- configuration change through a proposal that a second operator approves.
--
-- qtg.proposal_kind     what a proposal changes: lane_baseline (a row of
--                       lane_baselines), template (movement_templates),
--                       executor_config (an executor's node_config_schema
--                       and description; has_side_effect is not config)
-- qtg.proposal_state    PROPOSED -> APPLIED | REJECTED | EXPIRED | SUPERSEDED
-- config_proposals      one row per proposal, per network:
--   kind, subject       the lane, template name or executor key it changes
--   proposed_value      the whole value the subject gets when approved
--   before_value        the subject's value when it was proposed (NULL: no
--                       such lane or template yet); approval is refused when
--                       the subject no longer has this value
--   proposed_by/at      the proposer's login (session_user) and the clock
--   expires_at          after it, the proposal cannot be approved; the
--                       template_proposal_expiration sidecar marks it EXPIRED
--   decided_by/at       who approved, rejected, superseded or expired it
--                       (a login, or the expiring worker's name), and when
--   reason              a rejection's reason; why it was superseded
--   supersedes          the open proposal of the same subject this one
--                       replaced (one open proposal per subject)
--   The values are never updated: an approver approves what was proposed.
-- audit_outbox.entity   gains 'proposal'.
-- engine_limits         gains the bounds a proposal is checked against,
--                       when it is made and again when it is approved:
--   min_poll_seconds          a lane's poll interval floor is at least this
--   max_baseline_seconds      a lane's baseline is at most this (a day)
--   proposal_lifetime_seconds how long a proposal waits for its approver

SET LOCAL ROLE qtg_owner;

CREATE TYPE qtg.proposal_kind AS ENUM ('lane_baseline', 'template', 'executor_config');
CREATE TYPE qtg.proposal_state AS ENUM ('PROPOSED', 'APPLIED', 'REJECTED', 'EXPIRED', 'SUPERSEDED');

SELECT qtg_admin.apply_per_network($ddl$

CREATE TABLE config_proposals (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind           qtg.proposal_kind NOT NULL,
    subject        text NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
    proposed_value jsonb NOT NULL CHECK (jsonb_typeof(proposed_value) = 'object'),
    before_value   jsonb CHECK (jsonb_typeof(before_value) = 'object'),
    proposal_state qtg.proposal_state NOT NULL DEFAULT 'PROPOSED',
    proposed_by    text NOT NULL,
    proposed_at    timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL CHECK (expires_at > proposed_at),
    decided_by     text,
    decided_at     timestamptz,
    reason         text,
    supersedes     bigint REFERENCES config_proposals,
    CHECK ((proposal_state = 'PROPOSED') = (decided_at IS NULL)),
    CHECK ((decided_at IS NULL) = (decided_by IS NULL))
);
-- one open proposal per subject: a newer one supersedes it
CREATE UNIQUE INDEX config_proposals_open_subject_idx ON config_proposals (kind, subject)
    WHERE proposal_state = 'PROPOSED';
-- the expiry sidecar's scan
CREATE INDEX config_proposals_expiring_idx ON config_proposals (expires_at)
    WHERE proposal_state = 'PROPOSED';

ALTER TABLE audit_outbox DROP CONSTRAINT audit_outbox_entity_check;
ALTER TABLE audit_outbox ADD CONSTRAINT audit_outbox_entity_check
    CHECK (entity IN ('request', 'node', 'executor', 'template', 'lane', 'proposal'));

ALTER TABLE engine_limits
    ADD COLUMN min_poll_seconds numeric NOT NULL DEFAULT 1 CHECK (min_poll_seconds > 0),
    ADD COLUMN max_baseline_seconds numeric NOT NULL DEFAULT 86400 CHECK (max_baseline_seconds > 0),
    ADD COLUMN proposal_lifetime_seconds numeric NOT NULL DEFAULT 86400 CHECK (proposal_lifetime_seconds > 0);

$ddl$);
