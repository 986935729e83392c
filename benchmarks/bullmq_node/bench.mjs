// BullMQ on Node in aioqueue's benchmark (see ../README.md): one phase of a scenario per run.
//
// system_bullmq_node.py runs the scenarios (the server reset, memory readings, the MONITOR
// window, the percentiles) and calls this script for the phases that must run in Node:
//
//   node bench.mjs versions
//   node bench.mjs enqueue      --url U --events N [--first-index I] (--delay S | --delays-file F)
//   node bench.mjs work         --url U --events N [--until-stdin-closes]
//   node bench.mjs load-backlog --url U --events N --delay S
//
// Each prints its result as one line, "BENCH-RESULT <json>", on stdout; `work` first prints
// "ready" once its worker is taking jobs. Errors go to stderr with a non-zero exit code.
//
// Settings (from the installed source, bullmq 6.7 `dist/cjs/classes/worker.js`, `job.js`):
// concurrency 10 as everywhere (BullMQ's default is 1); jobs added with removeOnComplete, so
// a finished job is deleted instead of kept in the `completed` set (the benchmark reads no
// results, and aioqueue keeps none); ioredis at BullMQ's defaults (one connection for a queue,
// a normal and a blocking one for a worker). BullMQ probes the server's version itself, so
// its blocking waits are not rounded to whole seconds.

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { Queue, Worker } from 'bullmq';

const RESULT_MARKER = 'BENCH-RESULT ';
const READY_LINE = 'ready';
const QUEUE_NAME = 'bench';
const JOB_NAME = 'handle';
const JOB_OPTIONS = { removeOnComplete: true };
// Handler slots in every system's worker, and enqueue calls in flight (common.py).
const CONCURRENCY = 10;
const IN_FLIGHT = 32;
// Loading a backlog: jobs per addBulk call (one MULTI of addJob scripts), and calls in flight.
const BACKLOG_JOBS_PER_CALL = 1000;
const BACKLOG_CALLS_IN_FLIGHT = 2;

function report(result) {
  process.stdout.write(RESULT_MARKER + JSON.stringify(result) + '\n');
}

function connectionOptions(url) {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: Number(parsed.port || 6379) };
}

// A delay of 0 adds the job straight to the wait list; 1 ms sends a due-now job through the
// delayed sorted set, the path every other system's due events take too.
function delayMs(seconds) {
  return Math.max(1, Math.round(seconds * 1000));
}

function openQueue(url) {
  return new Queue(QUEUE_NAME, {
    connection: connectionOptions(url),
    defaultJobOptions: JOB_OPTIONS,
  });
}

// Calls `call(start, stop)` for consecutive batches of [0, total), `inFlight` at once (as
// common.run_in_flight does); returns the seconds taken.
async function runInFlight(total, batchSize, inFlight, call) {
  let next = 0;
  async function lane() {
    while (next < total) {
      const start = next;
      next = Math.min(total, start + batchSize);
      await call(start, next);
    }
  }
  const started = performance.now();
  await Promise.all(Array.from({ length: inFlight }, lane));
  return (performance.now() - started) / 1000;
}

function versions() {
  const require = createRequire(import.meta.url);
  report({
    versions: {
      bullmq: require('bullmq/package.json').version,
      ioredis: require('ioredis/package.json').version,
      node: process.versions.node,
    },
  });
}

async function enqueue({ url, events, firstIndex, delay, delaysFile }) {
  // The lateness scenario gives each event its own delay (seconds), in a JSON list.
  const delays = delaysFile ? JSON.parse(readFileSync(delaysFile, 'utf8')) : null;
  const queue = openQueue(url);
  try {
    await queue.waitUntilReady();
    const seconds = await runInFlight(events, 1, IN_FLIGHT, async (start) => {
      const wait = delayMs(delays ? delays[start] : delay);
      await queue.add(JOB_NAME, { index: firstIndex + start }, { delay: wait });
    });
    report({ seconds, events_per_s: events / seconds });
  } finally {
    await queue.close();
  }
}

async function work({ url, events, untilStdinCloses }) {
  const lateness = [];
  const seen = new Set();
  let handled = 0;
  let finish;
  const done = new Promise((resolve) => {
    finish = resolve;
  });
  // As in the Python systems, the drain's clock includes the worker's start-up.
  const started = performance.now();
  const worker = new Worker(
    QUEUE_NAME,
    async (job) => {
      // timestamp + opts.delay is the due time the producer computed, in ms on this
      // machine's clock (job.delay will not do: promoting a due job sets it to 0);
      // timeOrigin + now() is that clock with sub-millisecond resolution.
      const now = performance.timeOrigin + performance.now();
      seen.add(job.data.index);
      lateness.push((now - (Number(job.timestamp) + Number(job.opts.delay))) / 1000);
      handled += 1;
      if (handled >= events) {
        finish();
      }
    },
    { connection: connectionOptions(url), concurrency: CONCURRENCY, autorun: false },
  );
  worker.on('error', (error) => process.stderr.write(`worker error: ${error}\n`));
  await worker.waitUntilReady();
  const running = worker.run();
  running.catch((error) => {
    process.stderr.write(`the worker stopped: ${error.stack ?? error}\n`);
    process.exit(1);
  });
  const cpuAtReady = process.cpuUsage();
  const wallAtReady = performance.now();
  process.stdout.write(READY_LINE + '\n');
  if (untilStdinCloses) {
    // The idle scenario's worker runs until the driver closes our stdin.
    process.stdin.on('end', finish);
    process.stdin.resume();
  }
  await done;
  const cpu = process.cpuUsage(cpuAtReady);
  const wall = (performance.now() - wallAtReady) / 1000;
  const seconds = (performance.now() - started) / 1000;
  await worker.close();
  report({
    seconds,
    handled,
    distinct: seen.size,
    cpu_s: (cpu.user + cpu.system) / 1e6,
    wall_s: wall,
    lateness_s: lateness,
  });
}

async function loadBacklog({ url, events, delay }) {
  const queue = openQueue(url);
  try {
    const before = await queue.getDelayedCount();
    const opts = { delay: delayMs(delay) };
    const seconds = await runInFlight(
      events,
      BACKLOG_JOBS_PER_CALL,
      BACKLOG_CALLS_IN_FLIGHT,
      async (start, stop) => {
        const jobs = [];
        for (let index = start; index < stop; index += 1) {
          jobs.push({ name: JOB_NAME, data: { index }, opts });
        }
        await queue.addBulk(jobs);
      },
    );
    const loaded = (await queue.getDelayedCount()) - before;
    if (loaded !== events) {
      throw new Error(`loaded ${loaded} backlog jobs instead of ${events}`);
    }
    report({ seconds });
  } finally {
    await queue.close();
  }
}

async function main() {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      url: { type: 'string', default: 'redis://127.0.0.1:6379' },
      events: { type: 'string', default: '1000' },
      'first-index': { type: 'string', default: '0' },
      delay: { type: 'string', default: '0' },
      'delays-file': { type: 'string' },
      'until-stdin-closes': { type: 'boolean', default: false },
    },
  });
  const options = {
    url: values.url,
    events: Number(values.events),
    firstIndex: Number(values['first-index']),
    delay: Number(values.delay),
    delaysFile: values['delays-file'],
    untilStdinCloses: values['until-stdin-closes'],
  };
  const phase = positionals[0];
  if (phase === 'versions') {
    versions();
  } else if (phase === 'enqueue') {
    await enqueue(options);
  } else if (phase === 'work') {
    await work(options);
  } else if (phase === 'load-backlog') {
    await loadBacklog(options);
  } else {
    throw new Error(`unknown phase ${phase}: versions, enqueue, work or load-backlog`);
  }
}

main().then(
  // Exit once stdout has taken the report: a pipe is written asynchronously, and exiting at
  // once cut the worker's (its lateness samples pass 64 KiB) short.
  () => process.stdout.write('', () => process.exit(0)),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
