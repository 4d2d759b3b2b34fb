// Parallel fanout against the sandbox (real ClickHouse servers behind a test
// Kubernetes API): 20 statements applied to 1, 3, 8 and 16 pods, with pods
// one after another (parallelism 1) and in parallel (the default, 8), and
// what progress events cost. Every run changes the statements' fingerprint,
// so every statement runs on every pod. The live-schema check is off here:
// bench/e2e.mjs measures it.
// Run: node bench/fanout.mjs   (after `npm run build` and `cargo build --release -p clickhouse-schema-sandbox`)
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { apply } from '../dist/index.js';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const dir = join(fileURLToPath(new URL('..', import.meta.url)), '.sandbox-bench');
const RUNS = Number(process.env.BENCH_RUNS ?? 7);
process.on('exit', () => stopSandbox(dir));

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const twenty = (tag) => [
  'CREATE DATABASE IF NOT EXISTS bench',
  ...Array.from({ length: 19 }, (_, i) => `CREATE TABLE IF NOT EXISTS bench.t${i} (id UInt64, v String) ENGINE = MergeTree ORDER BY id /* ${tag} */`),
];

async function timed(pods, kubeconfig, parallelism, options) {
  const times = [];
  let state;
  for (let i = 0; i < RUNS + 1; i++) {
    const t0 = process.hrtime.bigint();
    const r = await apply(
      'bench-fanout',
      {
        target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
        statements: twenty(`${parallelism} ${i} ${Math.random()}`),
        kubeConfig: { kubeconfigPath: kubeconfig },
        parallelism,
        verify: 'off',
      },
      state,
      options,
    );
    // The first run creates the tables; the others find them (IF NOT EXISTS), as a redeploy does.
    if (i > 0) times.push(ms(t0));
    state = r.state;
    if (r.appliedTo.length !== pods) throw new Error(`applied to ${r.appliedTo.length} pods, expected ${pods}`);
  }
  return median(times);
}

const rows = [];
let onePod;
for (const pods of [1, 3, 8, 16]) {
  const { kubeconfig } = startSandbox(dir, pods);
  const sequential = await timed(pods, kubeconfig, 1);
  const parallel = await timed(pods, kubeconfig, 8);
  if (pods === 1) onePod = sequential;
  const row = { pods, sequential, parallel };
  if (pods === 3) {
    row.withEvents = await timed(pods, kubeconfig, 8, { onEvent: () => {} });
  }
  rows.push(row);
  stopSandbox(dir);
}

console.log(`20 statements per pod, median of ${RUNS} runs (ms); one pod: ${onePod.toFixed(0)} ms`);
for (const r of rows) {
  console.log(
    `${String(r.pods).padStart(2)} pod(s): parallelism 1 ${r.sequential.toFixed(0)} ms, parallelism 8 ${r.parallel.toFixed(0)} ms ` +
      `(${(r.parallel / onePod).toFixed(2)}x one pod)` +
      (r.withEvents === undefined ? '' : `; with onEvent ${r.withEvents.toFixed(0)} ms`),
  );
}
