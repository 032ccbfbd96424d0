// Graphile Worker beside the QTG engine: set up, bulk-enqueue, or drain.
//
//   node bench.js setup   CONNECTION_STRING
//   node bench.js enqueue CONNECTION_STRING N
//   node bench.js work    CONNECTION_STRING CONCURRENCY
//
// `work` uses the settings of Graphile Worker's performance page (concurrency
// 24, pool 25, a local queue of 500, job completions batched) and runs until
// SIGTERM; the bench stops it once the queue is drained.
"use strict";

const { run, runMigrations, makeWorkerUtils } = require("graphile-worker");

const TASK = "bench_noop";

async function main() {
  const [action, connectionString, arg] = process.argv.slice(2);
  const n = Number(arg || 0);
  if (action === "setup") {
    await runMigrations({ connectionString });
  } else if (action === "enqueue") {
    const utils = await makeWorkerUtils({ connectionString });
    try {
      // the documented bulk enqueue: one addJobs call (graphile_worker.add_jobs)
      const specs = Array.from({ length: n }, () => ({ identifier: TASK, payload: {} }));
      await utils.addJobs(specs);
    } finally {
      await utils.release();
    }
  } else if (action === "work") {
    const concurrency = n || 24;
    const runner = await run({
      connectionString,
      concurrency,
      maxPoolSize: concurrency + 1,
      noHandleSignals: false,
      pollInterval: 1000,
      preset: {
        worker: {
          localQueue: { size: 500 },
          completeJobBatchDelay: 0,
          failJobBatchDelay: 0,
        },
      },
      taskList: { [TASK]: async () => {} },
      logger: undefined,
    });
    await runner.promise;
  } else {
    throw new Error(`unknown action ${action}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
