"""expiration_checker (sidecar): movements past expires_at -> EXPIRED, unless a
side effect has started (then the expiry is waived and the movement runs on)."""

from __future__ import annotations

from qtg_runner.db import procs
from qtg_runner.loop import counting_batch

BATCH_SIZE = 100

batch = counting_batch(
    lambda worker_id: procs.expire_movements(BATCH_SIZE, worker_id),
    "movements_expired",
    "expiration_checker",
)
