// The package installed the way a user installs it: `npm pack` of the main
// package and of the linux-x64-gnu platform package built here, installed into
// a fresh project with the pins this package needs (alchemy 2.0.0-beta.79,
// effect and @effect/platform-node 4.0.0-rc.117, effect overridden), with no
// Rust toolchain on PATH; then a small stack is deployed and destroyed from
// that project against the sandbox. Nothing of this repository is on the
// project's module path: what it imports is what the tarballs carry.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// A fixed directory, so scripts/test.sh can stop this sandbox even when the
// test process is killed before its after() hook runs.
const dir = join(root, '.sandbox-install');
const work = mkdtempSync(join(tmpdir(), 'ch-schema-install-'));
const project = join(work, 'project');
const tarballs = join(work, 'tarballs');
// npm install of alchemy is large; a hang must still fail the test.
const timeout = 600_000;
let sandbox;
const pods = ['chi-sandbox-0-0-0', 'chi-sandbox-0-1-0'];

/** PATH without any Rust toolchain, as on a machine that never installed one. */
const pathWithoutRust = process.env.PATH.split(delimiter)
  .filter((p) => !/\.cargo|rustup/.test(p))
  .join(delimiter);
const userEnv = { ...process.env, PATH: pathWithoutRust, RUSTUP_HOME: '/nonexistent', CARGO_HOME: '/nonexistent' };
delete userEnv.NAPI_RS_FORCE_WASI;
delete userEnv.NAPI_RS_NATIVE_LIBRARY_PATH;

function run(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...options });
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  }
  return r.stdout;
}

/** `npm pack` of `from` into `tarballs`; returns the tarball's path. */
function pack(from) {
  const [info] = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', tarballs], { cwd: from }));
  return join(tarballs, info.filename);
}

/**
 * The platform package `npm/<platform>` with the binary built here copied in,
 * packed from a copy so the working tree keeps no binary under npm/.
 */
function packPlatform(platform, files) {
  const copy = join(work, `npm-${platform}`);
  cpSync(join(root, 'npm', platform), copy, { recursive: true });
  for (const f of files) {
    assert.ok(existsSync(join(root, f)), `${f} is built (npm run build:native)`);
    cpSync(join(root, f), join(copy, f));
  }
  return pack(copy);
}

before(() => {
  mkdirSync(tarballs, { recursive: true });
  mkdirSync(project, { recursive: true });
  sandbox = startSandbox(dir, 2);

  const main = pack(root);
  const native = packPlatform('linux-x64-gnu', ['clickhouse-schema.linux-x64-gnu.node']);
  const wasm = packPlatform('wasm32-wasi', [
    'clickhouse-schema.wasm32-wasi.wasm',
    'clickhouse-schema.wasi.cjs',
    'wasi-worker.mjs',
  ]);

  // The project a user starts from: alchemy's own dependencies must resolve
  // to the same effect, hence the overrides.
  writeFileSync(
    join(project, 'package.json'),
    JSON.stringify(
      {
        name: 'infra',
        private: true,
        type: 'module',
        overrides: {
          effect: '4.0.0-rc.117',
          '@effect/platform-node': '4.0.0-rc.117',
          '@effect/platform-node-shared': '4.0.0-rc.117',
        },
      },
      null,
      2,
    ),
  );
  // The platform tarballs are named explicitly: the registry does not have this
  // unpublished version, and npm would otherwise fetch them as the optional dependencies.
  run(
    'npm',
    ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', 'alchemy@2.0.0-beta.79', 'effect@4.0.0-rc.117', '@effect/platform-node@4.0.0-rc.117', main, native, wasm],
    { cwd: project, env: userEnv, timeout },
  );

  writeFileSync(
    join(project, 'stack.mjs'),
    `// A user's stack: one schema on every ClickHouse pod of the sandbox.
import * as Alchemy from 'alchemy';
import { deploy } from 'alchemy/Deploy';
import { destroy } from 'alchemy/Destroy';
import { LoggingCli } from 'alchemy/Cli/LoggingCli';
import * as Interaction from 'alchemy/Interaction';
import { AlchemyContextLive } from 'alchemy/AlchemyContext';
import { PlatformServices } from 'alchemy/Util/PlatformServices';
import * as Effect from 'effect/Effect';
import * as Layer from 'effect/Layer';
import { addonTarget, clickHouseSchema, clickHouseSchemaProvider } from 'alchemy-clickhouse-schema';

const [action, kubeconfigPath] = process.argv.slice(2);
const stack = Alchemy.Stack(
  'install-check',
  { providers: clickHouseSchemaProvider, state: Alchemy.localState() },
  Effect.gen(function* () {
    const schema = yield* clickHouseSchema('shop-schema', {
      target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
      kubeConfig: { kubeconfigPath },
      statements: [
        'CREATE DATABASE IF NOT EXISTS shop',
        'CREATE TABLE IF NOT EXISTS shop.orders (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id',
      ],
      onDelete: 'run',
      deleteStatements: ['DROP TABLE IF EXISTS shop.orders', 'DROP DATABASE IF EXISTS shop'],
    });
    return { podNames: schema.podNames };
  }),
);
const runtime = Layer.mergeAll(LoggingCli, Interaction.layerNonInteractive(), AlchemyContextLive).pipe(
  Layer.provideMerge(PlatformServices),
);
const program = action === 'deploy' ? deploy({ stack, stage: 'dev' }) : destroy({ stack, stage: 'dev' });
const result = await Effect.runPromise(program.pipe(Effect.provide(runtime), Effect.scoped));
console.log('BINDING ' + addonTarget);
console.log('RESULT ' + JSON.stringify(result ?? null));
`,
  );
});

after(() => {
  stopSandbox(dir);
  rmSync(work, { recursive: true, force: true });
});

describe('installed from packed tarballs into a fresh project', { timeout }, () => {
  test('the main tarball carries no binary and each platform tarball exactly one', () => {
    const installed = join(project, 'node_modules');
    const binaries = (d) =>
      readdirSync(d, { recursive: true }).filter((f) => /\.(node|wasm)$/.test(String(f)) && !String(f).startsWith('node_modules'));
    assert.deepEqual(binaries(join(installed, 'alchemy-clickhouse-schema')), []);
    assert.deepEqual(binaries(join(installed, 'alchemy-clickhouse-schema-linux-x64-gnu')), [
      'clickhouse-schema.linux-x64-gnu.node',
    ]);
    assert.deepEqual(binaries(join(installed, 'alchemy-clickhouse-schema-wasm32-wasi')), [
      'clickhouse-schema.wasm32-wasi.wasm',
    ]);
  });

  test('no Rust toolchain is reachable from the project', () => {
    const r = spawnSync('sh', ['-c', 'command -v cargo || command -v rustc'], { env: userEnv, encoding: 'utf8' });
    assert.notEqual(r.status, 0, `found ${r.stdout}`);
  });

  for (const [binding, env] of [
    ['native', userEnv],
    // The napi-rs switch: take the WASI build or fail.
    ['wasm32-wasi', { ...userEnv, NAPI_RS_FORCE_WASI: 'error' }],
  ]) {
    test(`the ${binding} binding deploys the stack to every pod and destroys it`, () => {
      const deployed = run('node', ['stack.mjs', 'deploy', sandbox.kubeconfig], { cwd: project, env, timeout });
      assert.match(deployed, new RegExp(`^BINDING ${binding}$`, 'm'), 'the binding under test was loaded');
      const outputs = JSON.parse(/^RESULT (.*)$/m.exec(deployed)[1]);
      assert.deepEqual(outputs.podNames, pods);
      for (const pod of pods) {
        assert.deepEqual(sandbox.tablesOn(pod, 'shop'), ['orders'], pod);
      }
      run('node', ['stack.mjs', 'destroy', sandbox.kubeconfig], { cwd: project, env, timeout });
      for (const pod of pods) {
        assert.equal(sandbox.query(pod, "SELECT count() FROM system.databases WHERE name = 'shop'"), '0', pod);
      }
    });
  }
});
