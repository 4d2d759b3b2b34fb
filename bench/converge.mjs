// What convergence costs, against the sandbox: one column added to 20 tables on 3 pods,
//   a. by declaration: the 20 CREATE TABLE IF NOT EXISTS carry the new column, converge: 'additive';
//   b. by hand: the same CREATEs unchanged, and 20 ALTER TABLE ... ADD COLUMN statements after them.
// Both from the same starting point (the 20 tables applied without the column, 100 rows each), each
// run in fresh databases; execs counted from the sandbox's exec log, time per apply.
// Run: node bench/converge.mjs   (after `npm run build`; SANDBOX_BIN for the sandbox binary)
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { apply } from '../dist/index.js';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const dir = join(fileURLToPath(new URL('..', import.meta.url)), '.sandbox-bench-converge');
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const TABLES = 20;
const { info, kubeconfig, control, query } = startSandbox(dir, 3);
process.on('exit', () => stopSandbox(dir));

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

const props = (statements, extra = {}) => ({
  target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
  statements,
  kubeConfig: { kubeconfigPath: kubeconfig },
  ...extra,
});
const creates = (db, column) => [
  `CREATE DATABASE IF NOT EXISTS ${db}`,
  ...Array.from({ length: TABLES }, (_, k) => `CREATE TABLE IF NOT EXISTS ${db}.t${k} (id UInt64${column}) ENGINE = MergeTree ORDER BY id`),
];

/** Applies the 20 tables without the column and fills them; returns the state. */
async function start(id, db) {
  const { state } = await apply(id, props(creates(db, '')));
  for (const pod of info.pods) {
    for (let k = 0; k < TABLES; k++) query(pod, `INSERT INTO ${db}.t${k} SELECT number FROM system.numbers LIMIT 100`);
  }
  return state;
}

/** Time and execs of one apply. */
async function measured(id, p, state) {
  await control('DELETE', '/sandbox/exec-log');
  const t0 = process.hrtime.bigint();
  await apply(id, p, state);
  const time = ms(t0);
  const execs = await control('GET', '/sandbox/exec-log');
  return { time, execs: execs.length };
}

const declared = [];
const byHand = [];
for (let run = 0; run < RUNS; run++) {
  const a = `bench_conv_a${run}`;
  const stateA = await start(a, a);
  declared.push(await measured(a, props(creates(a, ', n UInt8 DEFAULT 1'), { converge: 'additive' }), stateA));
  const b = `bench_conv_b${run}`;
  const stateB = await start(b, b);
  const alters = Array.from({ length: TABLES }, (_, k) => `ALTER TABLE ${b}.t${k} ADD COLUMN n UInt8 DEFAULT 1`);
  byHand.push(await measured(b, props([...creates(b, ''), ...alters]), stateB));
  for (const pod of info.pods) {
    for (const db of [a, b]) {
      const n = query(pod, `SELECT count() FROM system.columns WHERE database = '${db}' AND name = 'n'`);
      if (n !== String(TABLES)) throw new Error(`${db} on ${pod}: ${n} tables have the column`);
    }
  }
}
const summary = (rs) => `median ${median(rs.map((r) => r.time)).toFixed(0)} ms, ${rs[0].execs} execs`;
console.log(`${info.pods.length} pods, ${TABLES} tables, ${RUNS} runs`);
console.log(`by declaration (converge: 'additive'): ${summary(declared)}`);
console.log(`by hand (20 ALTER statements):        ${summary(byHand)}`);
