// The WebAssembly build next to the native one: cold `import` of the package,
// and apply of 20 statements to 3 sandbox pods (60 execs, 2 pod lists), each
// build in its own processes (NAPI_RS_FORCE_WASI=error selects the WASI one).
// Run: node bench/wasm-vs-native.mjs   (after `npm run build`, `npm run build:wasm`
// and `cargo build --release -p clickhouse-schema-sandbox`)
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const IMPORTS = Number(process.env.BENCH_IMPORTS ?? 5);

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

if (process.argv[2] === '--import') {
  // One cold import in a fresh process: the package (which also loads alchemy
  // and effect for the provider), or the addon's loader alone.
  const t0 = process.hrtime.bigint();
  const { addonTarget, __napiBindingTarget } = await import(process.argv[3] === 'addon' ? '../index.js' : '../dist/index.js');
  console.log(JSON.stringify({ addonTarget: addonTarget ?? __napiBindingTarget, ms: ms(t0) }));
  process.exit(0);
}

if (process.argv[2] === '--apply') {
  const kubeconfig = process.argv[3];
  const { addonTarget, apply } = await import('../dist/index.js');
  const props = (tag) => ({
    target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
    kubeConfig: { kubeconfigPath: kubeconfig },
    statements: [
      'CREATE DATABASE IF NOT EXISTS bench',
      ...Array.from({ length: 19 }, (_, i) => `CREATE TABLE IF NOT EXISTS bench.t${i} (id UInt64, v String) ENGINE = MergeTree ORDER BY id /* ${tag} */`),
    ],
  });
  const times = [];
  let state;
  for (let i = 0; i < RUNS; i++) {
    const t0 = process.hrtime.bigint();
    const r = await apply('bench', props(`${addonTarget} ${i}`), state);
    times.push(ms(t0));
    if (r.appliedTo.length !== 3) throw new Error(`applied to ${r.appliedTo.length} pods`);
    state = r.state;
  }
  console.log(JSON.stringify({ addonTarget, times, clusterId: state.clusterId }));
  process.exit(0);
}

const { startSandbox, stopSandbox } = await import('../scripts/lib/sandbox-client.mjs');
const dir = join(root, '.sandbox-bench');
const { kubeconfig } = startSandbox(dir, 3);
process.on('exit', () => stopSandbox(dir));

const builds = { native: {}, wasm: { NAPI_RS_FORCE_WASI: 'error' } };
const child = (env, ...args) => {
  const r = spawnSync(process.execPath, ['--no-warnings', fileURLToPath(import.meta.url), ...args], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`${args[0]} failed:\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1));
};

const results = {};
for (const [name, env] of Object.entries(builds)) {
  const imports = Array.from({ length: IMPORTS }, () => child(env, '--import', 'package'));
  const addonImports = Array.from({ length: IMPORTS }, () => child(env, '--import', 'addon'));
  const applied = child(env, '--apply', kubeconfig);
  results[name] = {
    target: applied.addonTarget,
    import: median(imports.map((i) => i.ms)),
    addonImport: median(addonImports.map((i) => i.ms)),
    apply: median(applied.times),
    clusterId: applied.clusterId,
  };
}
const wasm = join(root, 'clickhouse-schema.wasm32-wasi.wasm');
console.log(`sandbox: 3 pods; ${RUNS} applies and ${IMPORTS} cold imports per build (medians)\n`);
for (const [name, r] of Object.entries(results)) {
  console.log(
    `${name.padEnd(6)} (${r.target}): import of the package ${r.import.toFixed(0)} ms, of the addon alone ${r.addonImport.toFixed(0)} ms; ` +
      `apply of 20 statements to 3 pods ${r.apply.toFixed(0)} ms`,
  );
}
const ratio = (key) => (results.wasm[key] / results.native[key]).toFixed(2);
console.log(`\nWASM / native: package import ${ratio('import')}x, addon import +${(results.wasm.addonImport - results.native.addonImport).toFixed(0)} ms, apply ${ratio('apply')}x`);
console.log(`same clusterId in both builds: ${results.wasm.clusterId === results.native.clusterId}`);
console.log(`.wasm size: ${(statSync(wasm).size / 1024 / 1024).toFixed(2)} MiB`);
