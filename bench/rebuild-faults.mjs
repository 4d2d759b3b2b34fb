// More seeds of the fault harness than the test command runs (tests/rebuild-faults.test.mjs), on
// local tables and on one replica set of two, against the 18.16 sandbox; prints each seed's
// verdict and the failing ones, to replay with REBUILD_FAULT_SEEDS / REBUILD_FAULT_REPLICATED_SEEDS
// (and REBUILD_FAULT_EVENTS=1 for the deploy again's events).
// Run: node bench/rebuild-faults.mjs [local seeds, default 1-40] [replicated seeds, default 31-50]
//   (after `npm run build` and `cargo build -p clickhouse-schema-sandbox`; SANDBOX_BIN as for the tests)
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const [local = '1-40', replicated = '31-50'] = process.argv.slice(2);
const started = Date.now();
const run = spawnSync(
  process.execPath,
  ['--test', '--test-reporter=spec', '--test-timeout=600000', 'tests/rebuild-faults.test.mjs'],
  {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
    env: { ...process.env, REBUILD_FAULT_SEEDS: local, REBUILD_FAULT_REPLICATED_SEEDS: replicated },
  },
);
const verdicts = run.stdout
  .split('\n')
  .map((line) => line.match(/^\s*([✔✖]) seed (\d+): every acknowledged row is (in the rebuilt table|on every replica)/))
  .filter(Boolean)
  .map(([, mark, seed, where]) => ({ ok: mark === '✔', seed: Number(seed), layout: where.startsWith('in') ? 'local' : 'replicated' }));
const notes = run.stdout.split('\n').filter((line) => /^\s*ℹ seed \d+:/.test(line));
for (const layout of ['local', 'replicated']) {
  const of = verdicts.filter((v) => v.layout === layout);
  const failed = of.filter((v) => !v.ok).map((v) => v.seed);
  console.log(`${layout}: ${of.length - failed.length} of ${of.length} seeds green${failed.length ? `; failing: ${failed.join(', ')}` : ''}`);
}
for (const line of notes) console.log(line.trim());
console.log(`${Math.round((Date.now() - started) / 1000)} s in all`);
process.exitCode = run.status;
