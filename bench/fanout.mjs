// Parallel fanout against the sandbox (real ClickHouse servers behind a test Kubernetes API): 20
// statements applied to 1, 3 and 8 pods, one exec per statement (execMode 'perStatement', what the
// product did before) against one exec per pod (execMode 'perPod', the default), with no exec setup
// time and with 150 ms per exec (the sandbox's exec setup delay, what a real cluster's API server,
// kubelet and container runtime add to each exec), and the execs each converge made (the sandbox's
// exec log). Every run changes the statements' fingerprint, so every statement runs on every pod;
// the live-schema check is off in the first table, and on (the default) in the second, where it runs
// in the statements' exec under 'perPod' and in one of its own under 'perStatement'. Pods in
// parallel (the default, 8).
// Run: node bench/fanout.mjs   (after `npm run build` and `cargo build --release -p clickhouse-schema-sandbox`)
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { apply } from '../dist/index.js';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const dir = join(fileURLToPath(new URL('..', import.meta.url)), '.sandbox-bench');
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
process.on('exit', () => stopSandbox(dir));

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const twenty = (tag) => [
  'CREATE DATABASE IF NOT EXISTS bench',
  ...Array.from({ length: 19 }, (_, i) => `CREATE TABLE IF NOT EXISTS bench.t${i} (id UInt64, v String) ENGINE = MergeTree ORDER BY id /* ${tag} */`),
];

/** Median time of a converge of 20 statements, and the execs the last one made. */
async function timed(sandbox, pods, execMode, verify = 'off') {
  const times = [];
  let state;
  let execs = 0;
  for (let i = 0; i < RUNS + 1; i++) {
    await sandbox.control('DELETE', '/sandbox/exec-log');
    const t0 = process.hrtime.bigint();
    const r = await apply(
      'bench-fanout',
      {
        target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
        statements: twenty(`${execMode} ${i} ${Math.random()}`),
        kubeConfig: { kubeconfigPath: sandbox.kubeconfig },
        execMode,
        verify,
      },
      state,
    );
    // The first run creates the tables; the others find them (IF NOT EXISTS), as a redeploy does.
    if (i > 0) times.push(ms(t0));
    state = r.state;
    if (r.appliedTo.length !== pods) throw new Error(`applied to ${r.appliedTo.length} pods, expected ${pods}`);
    execs = (await sandbox.control('GET', '/sandbox/exec-log')).length;
  }
  return { ms: median(times), execs };
}

const rows = [];
const checked = [];
for (const pods of [1, 3, 8]) {
  const sandbox = startSandbox(dir, pods);
  for (const setup of [0, 150]) {
    await sandbox.control('PUT', '/sandbox/exec-setup', { ms: setup });
    const before = await timed(sandbox, pods, 'perStatement');
    const after = await timed(sandbox, pods, 'perPod');
    rows.push({ pods, setup, before, after });
    const checkedBefore = await timed(sandbox, pods, 'perStatement', 'fail');
    const checkedAfter = await timed(sandbox, pods, 'perPod', 'fail');
    checked.push({ pods, setup, before: checkedBefore, after: checkedAfter });
  }
  stopSandbox(dir);
}

console.log(`20 statements per pod, pods in parallel (8 at once), median of ${RUNS} runs`);
for (const r of rows) {
  console.log(
    `${String(r.pods).padStart(2)} pod(s), exec setup ${String(r.setup).padStart(3)} ms: ` +
      `an exec per statement ${r.before.ms.toFixed(0)} ms (${r.before.execs} execs), ` +
      `an exec per pod ${r.after.ms.toFixed(0)} ms (${r.after.execs} execs): ${(r.before.ms / r.after.ms).toFixed(1)}x`,
  );
}
console.log('The same with the live-schema check on (verify: \'fail\', the default)');
for (const r of checked) {
  console.log(
    `${String(r.pods).padStart(2)} pod(s), exec setup ${String(r.setup).padStart(3)} ms: ` +
      `an exec per statement and one per check ${r.before.ms.toFixed(0)} ms (${r.before.execs} execs), ` +
      `an exec per pod ${r.after.ms.toFixed(0)} ms (${r.after.execs} execs): ${(r.before.ms / r.after.ms).toFixed(1)}x`,
  );
}
