// The live-schema check's cost per pod on each engine of the sandbox (README, "The second
// engine"): a one-pod sandbox of 18.16 and one of the 26.9 engine, the same four objects on each,
// then `verify()` (one pod list and one exec of the check's script) timed RUNS times, next to one
// statement's exec (`apply` of one statement that changes nothing, verify 'off'). Run after
// `npm run build`: `node bench/live-schema-engines.mjs` (RUNS=n to change the count).
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { apply, verify } from '../dist/index.js';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const runs = Number(process.env.RUNS ?? 7);
const statements = [
  'CREATE DATABASE IF NOT EXISTS bench',
  'CREATE TABLE IF NOT EXISTS bench.events (id UInt64, at DateTime, note String) ENGINE = MergeTree ORDER BY (at, id)',
  'CREATE TABLE IF NOT EXISTS bench.totals (day Date, n UInt64) ENGINE = SummingMergeTree ORDER BY day',
  'CREATE VIEW IF NOT EXISTS bench.recent AS SELECT id, at FROM bench.events WHERE at > now() - 3600',
];

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return { median: s[Math.floor(s.length / 2)], min: s[0], max: s[s.length - 1] };
}
const fmt = ({ median, min, max }) => `median ${median.toFixed(0)} ms (${min.toFixed(0)}-${max.toFixed(0)})`;

for (const engine of ['18.16', 'modern']) {
  const dir = join(root, `.sandbox-bench-${engine}`);
  const sandbox = startSandbox(dir, 1, { engine });
  try {
    const props = (extra = {}) => ({
      target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
      kubeConfig: { kubeconfigPath: sandbox.kubeconfig },
      statements,
      verify: 'off',
      ...extra,
    });
    const { state } = await apply('bench', props());
    const checks = [];
    for (let i = 0; i < runs; i++) {
      const t0 = process.hrtime.bigint();
      const result = await verify('bench', props({ verify: 'fail' }), state);
      checks.push(ms(t0));
      if (result.drifted) throw new Error(`unexpected drift: ${JSON.stringify(result)}`);
    }
    const execs = [];
    for (let i = 0; i < runs; i++) {
      const t0 = process.hrtime.bigint();
      await apply(`one-${i}`, props({ statements: ['CREATE DATABASE IF NOT EXISTS bench'] }));
      execs.push(ms(t0));
    }
    console.log(`${sandbox.info.engine}: the check of one pod (4 objects; 1 pod list, 1 exec), ${runs} runs: ${fmt(stats(checks))}`);
    console.log(`${sandbox.info.engine}: one statement's apply (1 pod list, 1 exec), ${runs} runs: ${fmt(stats(execs))}`);
  } finally {
    stopSandbox(dir);
  }
}
