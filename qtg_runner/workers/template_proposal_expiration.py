"""template_proposal_expiration (sidecar, the seed's name): configuration
proposals (lane pacing, templates, executor configuration) past expires_at
-> EXPIRED, audited. approve_proposal refuses an expired proposal already;
this closes it, so open_proposals and the audit log say what became of it."""

from __future__ import annotations

from qtg_runner.db import procs
from qtg_runner.loop import counting_batch

BATCH_SIZE = 100

batch = counting_batch(
    lambda worker_id: procs.expire_proposals(BATCH_SIZE, worker_id),
    "proposals_expired",
    "template_proposal_expiration",
)
