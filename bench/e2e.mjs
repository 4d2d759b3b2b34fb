// End-to-end benchmark against the sandbox (real ClickHouse servers behind a
// test Kubernetes API): what an unchanged converge costs, how long 20
// statements take on 3 pods, the addon's per-exec overhead next to
// `kubectl exec` of the byte-identical command on the same sandbox, and what
// the live-schema check costs per pod and as verify() on 3 pods.
// Run: node bench/e2e.mjs   (after `npm run build` and `cargo build --release -p clickhouse-schema-sandbox`)
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { apply, verify } from '../dist/index.js';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const dir = join(fileURLToPath(new URL('..', import.meta.url)), '.sandbox-bench');
const RUNS = Number(process.env.BENCH_RUNS ?? 10);
const { info, kubeconfig, control } = startSandbox(dir, 3);
process.on('exit', () => stopSandbox(dir));

const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.floor(q * s.length))];
  return { median: at(0.5), p90: at(0.9), min: s[0], max: s[s.length - 1] };
};
const fmt = ({ median, p90, min, max }) => `median ${median.toFixed(1)} ms, p90 ${p90.toFixed(1)}, min ${min.toFixed(1)}, max ${max.toFixed(1)}`;
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

const props = (statements) => ({
  target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
  statements,
  kubeConfig: { kubeconfigPath: kubeconfig },
  // Sections 1-3 count statement execs; section 4 measures the check itself.
  verify: 'off',
});
const twenty = (tag) => [
  'CREATE DATABASE IF NOT EXISTS bench',
  ...Array.from({ length: 19 }, (_, i) => `CREATE TABLE IF NOT EXISTS bench.t${i} (id UInt64, v String) ENGINE = MergeTree ORDER BY id /* ${tag} */`),
];

console.log(`sandbox: 3 pods; ${RUNS} runs per figure\n`);

// 1. Applying 20 statements to 3 pods (a changed fingerprint each run, so everything re-runs).
const applyTimes = [];
let state;
for (let i = 0; i < RUNS; i++) {
  await control('DELETE', '/sandbox/exec-log');
  const t0 = process.hrtime.bigint();
  const r = await apply('bench', props(twenty(`run ${i}`)), state);
  applyTimes.push(ms(t0));
  state = r.state;
  const execs = (await control('GET', '/sandbox/exec-log')).length;
  if (execs !== 60) throw new Error(`expected 60 execs, saw ${execs}`);
}
const applyStats = stats(applyTimes);
console.log(`apply of 20 statements to 3 pods (60 execs, 2 pod lists): ${fmt(applyStats)}`);
console.log(`  per exec, list calls included: ${(applyStats.median / 60).toFixed(2)} ms`);

// 2. An unchanged converge.
const noopTimes = [];
let calls;
for (let i = 0; i < RUNS * 5; i++) {
  await control('DELETE', '/sandbox/api-log');
  const t0 = process.hrtime.bigint();
  const r = await apply('bench', props(twenty(`run ${RUNS - 1}`)), state);
  noopTimes.push(ms(t0));
  if (r.changed) throw new Error('expected a no-op');
  calls = await control('GET', '/sandbox/api-log');
}
const lists = calls.filter((c) => c.method === 'GET' && c.path.endsWith('/pods')).length;
const execs = calls.filter((c) => c.path.endsWith('/exec')).length;
console.log(`unchanged converge: ${lists} pod list, ${execs} exec, ${calls.length} API request(s) in all; ${fmt(stats(noopTimes))}`);

// 3. Per-exec: kubectl exec of the byte-identical command and stdin.
await control('DELETE', '/sandbox/exec-log');
await apply('bench', props(twenty('kubectl')), state);
const sample = (await control('GET', '/sandbox/exec-log')).find((r) => r.pod === info.pods[0] && r.stdin.includes('bench.t5'));
const kubectlTimes = [];
for (let i = 0; i < RUNS * 2; i++) {
  const t0 = process.hrtime.bigint();
  const r = spawnSync('kubectl', ['--kubeconfig', kubeconfig, 'exec', '-i', info.pods[0], '-c', 'clickhouse', '--', ...sample.argv], {
    input: sample.stdin,
    encoding: 'utf8',
  });
  kubectlTimes.push(ms(t0));
  if (r.status !== 0) throw new Error(`kubectl exec failed: ${r.stderr}`);
}
const kubectlStats = stats(kubectlTimes);
console.log(`kubectl exec of the same command (one statement): ${fmt(kubectlStats)}`);
console.log(
  `addon per exec (median, lists included) vs kubectl exec: ${(applyStats.median / 60).toFixed(2)} ms vs ${kubectlStats.median.toFixed(1)} ms ` +
    `(${(kubectlStats.median / (applyStats.median / 60)).toFixed(1)}x)`,
);

// 4. The live-schema check: one exec per pod after the statements, and verify().
const checkedTimes = [];
for (let i = 0; i < RUNS; i++) {
  await control('DELETE', '/sandbox/exec-log');
  const t0 = process.hrtime.bigint();
  const r = await apply('bench', { ...props(twenty(`checked ${i}`)), verify: 'fail' }, state);
  checkedTimes.push(ms(t0));
  state = r.state;
  const execs = (await control('GET', '/sandbox/exec-log')).length;
  if (execs !== 63) throw new Error(`expected 60 statement execs and 3 checks, saw ${execs}`);
}
const checkedStats = stats(checkedTimes);
const perCheck = (checkedStats.median - applyStats.median) / 3;
console.log(`apply of 20 statements to 3 pods with verify 'fail' (60 execs + 3 checks of 20 objects): ${fmt(checkedStats)}`);
console.log(
  `  the check per pod (median difference / 3): ${perCheck.toFixed(1)} ms, next to one statement exec ` +
    `${(applyStats.median / 60).toFixed(1)} ms (${(perCheck / (applyStats.median / 60)).toFixed(2)}x)`,
);
const verifyTimes = [];
const verified = twenty(`checked ${RUNS - 1}`);
for (let i = 0; i < RUNS; i++) {
  const t0 = process.hrtime.bigint();
  const result = await verify('bench', { ...props(verified), verify: 'fail' }, state);
  verifyTimes.push(ms(t0));
  if (result.drifted || result.pods.length !== 3) throw new Error(`unexpected verify result: ${JSON.stringify(result)}`);
}
console.log(`verify() on 3 pods with 20 objects (1 pod list, 3 execs): ${fmt(stats(verifyTimes))}`);
