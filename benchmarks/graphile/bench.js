// Graphile Worker beside the QTG engine: set up, bulk-enqueue, or drain.
//
//   node bench.js setup   CONNECTION_STRING
//   node bench.js enqueue CONNECTION_STRING N
//   node bench.js work    CONNECTION_STRING CONCURRENCY
//
// `work` uses the settings of Graphile Worker's performance page (concurrency
// 24, pool 25, a local queue of 500, job completions batched) and runs until
// SIGTERM; the bench stops it once the queue is drained.
//
//   node bench.js enqueue-eg CONNECTION_STRING N
//   node bench.js work-eg    CONNECTION_STRING CONCURRENCY
//
// The equal-guarantee job: one per movement (its id in the payload), whose
// task runs what a movement writes (../equal/movement.sql: the intent with its
// audit and callback rows committed before the side effect, the side effect,
// the report), each statement its own transaction on the worker's pool.
"use strict";

const fs = require("fs");
const path = require("path");
const { run, runMigrations, makeWorkerUtils, Logger, consoleLogFactory } = require("graphile-worker");

// warnings and errors only: the default logger prints a line per completed job,
// client CPU that is no part of the work measured
const quietLogger = new Logger((scope) => {
  const log = consoleLogFactory(scope);
  return (level, message, meta) => {
    if (level === "error" || level === "warning") log(level, message, meta);
  };
});

const TASK = "bench_noop";
const MOVEMENT = "bench_movement";

function movementSql() {
  const text = fs.readFileSync(path.join(__dirname, "..", "equal", "movement.sql"), "utf8");
  const parts = text.split(/^-- name: (\w+)\s*$/m);
  const out = {};
  for (let i = 1; i < parts.length; i += 2) out[parts[i]] = parts[i + 1].trim();
  return out;
}

const taskList = {
  [TASK]: async () => {},
  [MOVEMENT]: async (payload, helpers) => {
    const sql = movementSql.cached || (movementSql.cached = movementSql());
    const id = payload.id;
    await helpers.query(sql.record_intent, [id]);
    await helpers.query(sql.submit, [id]);
    await helpers.query(sql.report, [id]);
  },
};

async function main() {
  const [action, connectionString, arg] = process.argv.slice(2);
  const n = Number(arg || 0);
  if (action === "setup") {
    await runMigrations({ connectionString });
  } else if (action === "enqueue" || action === "enqueue-eg") {
    const utils = await makeWorkerUtils({ connectionString });
    try {
      // the documented bulk enqueue: one addJobs call (graphile_worker.add_jobs)
      const specs = Array.from({ length: n }, (_, i) =>
        action === "enqueue"
          ? { identifier: TASK, payload: {} }
          : { identifier: MOVEMENT, payload: { id: i + 1 } },
      );
      await utils.addJobs(specs);
    } finally {
      await utils.release();
    }
  } else if (action === "work" || action === "work-eg") {
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
      taskList,
      logger: quietLogger,
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
