// What coordination costs, against the sandbox (real ClickHouse servers behind
// the test Kubernetes API with its Lease API):
//   1. the lease on an apply: Lease API calls and time, next to the same apply without it;
//   2. an unchanged deploy with lease and ledger on: calls made (the target: none beyond the pod list);
//   3. the ledger: what its write adds to an apply, and a read per pod (status() on 3 pods).
// Run: node bench/coordination.mjs   (after `npm run build` and `cargo build --release -p clickhouse-schema-sandbox`)
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { apply, status } from '../dist/index.js';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const dir = join(fileURLToPath(new URL('..', import.meta.url)), '.sandbox-bench');
const RUNS = Number(process.env.BENCH_RUNS ?? 10);
const { info, kubeconfig, control } = startSandbox(dir, 3);
process.on('exit', () => stopSandbox(dir));

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const pods = info.pods.length;

const props = (tag, extra = {}) => ({
  target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
  statements: [
    'CREATE DATABASE IF NOT EXISTS bench_coord',
    `CREATE TABLE IF NOT EXISTS bench_coord.t (id UInt64) ENGINE = MergeTree ORDER BY id /* ${tag} */`,
  ],
  kubeConfig: { kubeconfigPath: kubeconfig, context: 'sandbox-lease' },
  verify: 'off',
  ...extra,
});

/** Median time of an apply that runs (a new fingerprint each run), with the calls of the last one. */
async function applies(id, extra) {
  const times = [];
  let state;
  let api = [];
  let execs = [];
  for (let i = 0; i < RUNS; i++) {
    await control('DELETE', '/sandbox/api-log');
    await control('DELETE', '/sandbox/exec-log');
    const t0 = process.hrtime.bigint();
    state = (await apply(id, props(`run ${i}`, extra), state)).state;
    times.push(ms(t0));
    api = await control('GET', '/sandbox/api-log');
    execs = await control('GET', '/sandbox/exec-log');
  }
  return { median: median(times), api, execs, state };
}

console.log(`sandbox: ${pods} pods; ${RUNS} runs per figure; 2 statements per apply\n`);

const plain = await applies('bench-plain', {});
const leased = await applies('bench-lease', { lease: true });
const leaseCalls = leased.api.filter((r) => r.path.includes('/leases'));
console.log(`1. apply without lease: median ${plain.median.toFixed(1)} ms`);
console.log(
  `   apply with lease:    median ${leased.median.toFixed(1)} ms (+${(leased.median - plain.median).toFixed(1)} ms); ` +
    `${leaseCalls.length} Lease API calls: ${leaseCalls.map((r) => r.method).join(' ')}`,
);

const both = await applies('bench-both', { lease: true, ledger: { database: 'bench_ops' } });
await control('DELETE', '/sandbox/api-log');
await control('DELETE', '/sandbox/exec-log');
const t0 = process.hrtime.bigint();
const unchanged = await apply('bench-both', props(`run ${RUNS - 1}`, { lease: true, ledger: { database: 'bench_ops' } }), both.state);
const unchangedMs = ms(t0);
const unchangedApi = await control('GET', '/sandbox/api-log');
const unchangedExecs = await control('GET', '/sandbox/exec-log');
if (unchanged.changed) throw new Error('expected an unchanged deploy');
console.log(
  `2. unchanged deploy, lease and ledger on: ${unchangedMs.toFixed(1)} ms, ${unchangedApi.length} API call(s) ` +
    `(${unchangedApi.map((r) => `${r.method} ${r.path}`).join(', ')}), ${unchangedExecs.length} exec(s)`,
);

const ledgerWrites = both.execs.filter((e) => e.stdin.startsWith('CREATE DATABASE IF NOT EXISTS `bench_ops`'));
console.log(
  `3. apply with lease and ledger: median ${both.median.toFixed(1)} ms (+${(both.median - leased.median).toFixed(1)} ms over lease alone; ` +
    `${ledgerWrites.length} ledger write exec(s))`,
);
const reads = [];
for (let i = 0; i < RUNS; i++) {
  const t = process.hrtime.bigint();
  const s = await status('bench-both', props(`run ${RUNS - 1}`, { ledger: { database: 'bench_ops' } }));
  reads.push(ms(t));
  if (!s.pods.every((p) => p.current)) throw new Error('status: every pod should be current');
}
console.log(
  `   status() on ${pods} pods (1 pod list, ${pods} ledger reads in parallel): median ${median(reads).toFixed(1)} ms`,
);
