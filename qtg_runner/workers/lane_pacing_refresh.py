"""lane_pacing_refresh (sidecar): each lane's poll schedule learned again from
its latency samples (refresh_lane_pacing), every minute. The rule is in SQL;
this only calls it and logs the lanes whose schedule it drew."""

from __future__ import annotations

import logging

from qtg_runner.db import procs
from qtg_runner.loop import WorkerContext


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    lanes = await ctx.all(procs.refresh_lane_pacing())
    learned = [lane for lane in lanes if lane.learned]
    if learned:
        ctx.log(
            logging.DEBUG,
            "lane_pacing_refreshed",
            "lane_pacing_refresh",
            lanes=",".join(lane.lane for lane in learned),
        )
    return len(learned)
