// What a rebuild costs, against the sandbox (one pod, a real ClickHouse 18.16):
//   1. the backfill's throughput in rows/s (from the event that starts it to the last partition's),
//      next to one `INSERT INTO ... SELECT` of the same rows into a table of the new definition;
//   2. what the verification adds: 'count' and 'checksum', from the last partition to the verdict;
//   3. a rebuild of a table receiving about 100 rows/s (tests/lib/writer.mjs, batches of 20): the
//      whole apply, and how long the dual write lasts (its view created to the last swap).
// Run: node bench/rebuild.mjs   (after `npm run build` and `cargo build -p clickhouse-schema-sandbox`)
// BENCH_ROWS (default 2,000,000) rows in BENCH_PARTITIONS (default 10) partitions; BENCH_RUNS (default 3);
// BENCH_TRAFFIC=0 leaves out part 3.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { apply } from '../dist/index.js';
import { startWriter } from '../tests/lib/writer.mjs';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const dir = join(fileURLToPath(new URL('..', import.meta.url)), '.sandbox-bench');
const ROWS = Number(process.env.BENCH_ROWS ?? 2_000_000);
const PARTITIONS = Number(process.env.BENCH_PARTITIONS ?? 10);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const sandbox = startSandbox(dir, 1);
const pod = sandbox.info.pods[0];
process.on('exit', () => stopSandbox(dir));

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const COLUMNS = '(id UInt64, kind String, at DateTime, v Float64, note String)';
const create = (name, order) =>
  `CREATE TABLE IF NOT EXISTS bench_rb.${name} ${COLUMNS} ENGINE = MergeTree PARTITION BY toYYYYMMDD(at) ORDER BY ${order}`;
const fill = (name) =>
  `INSERT INTO bench_rb.${name} SELECT number, concat('k', toString(number % 13)), ` +
  `toDateTime('2026-01-01 00:00:00') + intDiv(number * ${PARTITIONS}, ${ROWS}) * 86400, number / 7, toString(number) ` +
  `FROM system.numbers LIMIT ${ROWS}`;
const props = (name, order, verify) => ({
  target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
  statements: ['CREATE DATABASE IF NOT EXISTS bench_rb', create(name, order)],
  kubeConfig: { kubeconfigPath: sandbox.kubeconfig },
  verify: 'off',
  rebuild: { [`bench_rb.${name}`]: { cutoverColumn: 'at', cutoverDelaySeconds: 1, verify, keepOld: false } },
});

const results = { count: [], checksum: [], single: [] };
for (let run = 0; run < RUNS; run++) {
  for (const verify of ['count', 'checksum']) {
    const name = `t_${verify}_${run}`;
    const first = await apply('bench-rebuild', props(name, 'id', verify));
    sandbox.query(pod, fill(name));
    const marks = {};
    await apply('bench-rebuild', props(name, '(kind, id)', verify), first.state, {
      onEvent: (e) => {
        if (e.kind !== 'rebuild') return;
        const now = performance.now();
        if (e.step === 'backfill' && !e.partition) marks.start = now;
        if (e.step === 'backfill' && typeof e.rows === 'number') marks.lastCopy = now;
        if (e.step === 'verify') marks.verified = now;
      },
    });
    results[verify].push({ backfill: marks.lastCopy - marks.start, verify: marks.verified - marks.lastCopy });
    sandbox.query(pod, `DROP TABLE bench_rb.${name}`);
  }
    // The same rows, one INSERT ... SELECT into a table of the new definition; kubectl's own start,
  // timed with an empty query, is taken off.
  const name = `single_${run}`;
  for (const sql of [create(name, 'id'), create(`${name}_to`, '(kind, id)')]) sandbox.query(pod, sql);
  sandbox.query(pod, fill(name));
  const t0 = performance.now();
  sandbox.query(pod, `INSERT INTO bench_rb.${name}_to SELECT * FROM bench_rb.${name}`);
  const withKubectl = performance.now() - t0;
  const t1 = performance.now();
  sandbox.query(pod, 'SELECT 1 FORMAT Null');
  const kubectl = performance.now() - t1;
  results.single.push(withKubectl - kubectl);
  sandbox.query(pod, `DROP TABLE bench_rb.${name}`);
  sandbox.query(pod, `DROP TABLE bench_rb.${name}_to`);
}

const backfill = median(results.count.map((r) => r.backfill).concat(results.checksum.map((r) => r.backfill)));
const single = median(results.single);
const rate = (ms) => Math.round(ROWS / (ms / 1000)).toLocaleString('en');
console.log(`${ROWS.toLocaleString('en')} rows in ${PARTITIONS} partitions, ${RUNS} run(s) each, medians:`);
console.log(`backfill (partition by partition, with receipts): ${backfill.toFixed(0)} ms = ${rate(backfill)} rows/s`);
console.log(`one INSERT INTO ... SELECT of the same rows:     ${single.toFixed(0)} ms = ${rate(single)} rows/s`);
console.log(`ratio (backfill throughput / single INSERT):     ${(single / backfill).toFixed(2)}x`);
console.log(`verification, count:    +${median(results.count.map((r) => r.verify)).toFixed(0)} ms`);
console.log(`verification, checksum: +${median(results.checksum.map((r) => r.verify)).toFixed(0)} ms`);

// 3. Under writes: the same table, a writer adding batches of 20 rows as fast as one insert exec
// allows (reported: its rows/s), for the whole apply.
const traffic = { apply: [], dualWrite: [], rate: [], restarts: 0 };
const TRAFFIC_RUNS = process.env.BENCH_TRAFFIC === '0' ? 0 : RUNS;
for (let run = 0; run < TRAFFIC_RUNS; run++) {
  const name = `t_traffic_${run}`;
  const first = await apply('bench-rebuild', props(name, 'id', 'count'));
  sandbox.query(pod, fill(name));
  // The writer's four columns; `note` takes its default.
  const writer = startWriter(sandbox, [pod], `bench_rb.${name} (id, kind, at, v)`, { seed: run + 1, pauseMs: 0, batch: 20 });
  await writer.until((w) => w.acknowledged() >= 3);
  const marks = {};
  const t0 = performance.now();
  const rows0 = writer.acknowledged();
  // A row dated ahead written in the instant between the copy of such rows and the view's
  // creation makes the check before the backfill start the rebuild over (README): the deploy is
  // run again, as a user would, and the time counts every attempt.
  for (let attempt = 1; ; attempt++) {
    try {
      await apply('bench-rebuild', props(name, '(kind, id)', 'count'), first.state, {
        onEvent: (e) => {
          if (e.kind !== 'rebuild') return;
          if (e.step === 'dualWrite') marks.dualWrite = performance.now();
          if (e.step === 'swap' && /: swapped;/.test(e.message)) marks.swapped = performance.now();
        },
      });
      break;
    } catch (err) {
      if (err.code !== 'E_REBUILD_FAILED' || attempt >= 3) throw err;
      traffic.restarts += 1;
    }
  }
  const elapsed = performance.now() - t0;
  const { failed } = await writer.stop();
  traffic.apply.push(elapsed);
  traffic.dualWrite.push(marks.swapped - marks.dualWrite);
  traffic.rate.push(((writer.acknowledged() - rows0) * 20) / (elapsed / 1000));
  if (failed.length > 0) console.log(`run ${run}: ${failed.length} insert(s) failed: ${failed[0]}`);
  sandbox.query(pod, `DROP TABLE bench_rb.${name}`);
}
if (TRAFFIC_RUNS === 0) process.exit(0);
console.log(`under writes (${median(traffic.rate).toFixed(0)} rows/s acknowledged during the apply):`);
console.log(`  the whole apply: ${median(traffic.apply).toFixed(0)} ms; the dual write (view created to last swap): ${median(traffic.dualWrite).toFixed(0)} ms`);
console.log(`  deploys run again after the check before the backfill started a rebuild over: ${traffic.restarts} in ${RUNS} run(s)`);
