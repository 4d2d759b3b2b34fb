// The package installed the way a user installs it: the release is staged and
// packed (the main package, whose optionalDependencies napi pre-publish writes,
// and one package per platform with its binary; tests/lib/release.mjs), served
// as published by a local registry that forwards everything else to npm's
// (tests/lib/npm-registry.mjs), and installed by name into fresh projects with
// README's command and pins, with no Rust toolchain on PATH. npm picks the
// platform package. A small stack is then deployed and destroyed from each
// project against the sandbox:
//   - a plain install gets linux-x64-gnu and runs the native addon;
//   - `npm install --cpu=wasm32`, what a platform without a native package
//     does, gets only the WebAssembly package, and the loader falls back to it
//     with no switch set.
// Nothing of this repository is on the projects' module path.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';
import { startRegistry } from './lib/npm-registry.mjs';
import { packRelease } from './lib/release.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// See tests/lib/sandbox-dir.mjs.
const dir = sandboxDir('install');
const work = mkdtempSync(join(tmpdir(), 'ch-schema-install-'));
const projects = { native: join(work, 'native'), wasm: join(work, 'wasm') };
// npm install of alchemy is large; a hang must still fail the test.
const timeout = 600_000;
let sandbox;
let registry;
let release;
const pods = ['chi-sandbox-sandbox-0-0-0', 'chi-sandbox-sandbox-0-1-0'];
const { name, version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

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

/** Like run, without blocking the event loop (the registry answers from this process). */
function runAsync(cmd, args, options = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...options });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeout ?? timeout);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${cmd} ${args.join(' ')} exited ${code ?? signal}:\n${out}`));
    });
  });
}

/** The platform packages npm put into a project. */
function platformPackages(project) {
  return readdirSync(join(project, 'node_modules'))
    .filter((d) => d.startsWith(`${name}-`))
    .sort();
}

/** The .node/.wasm files an installed package carries. */
function binaries(project, pkg) {
  return readdirSync(join(project, 'node_modules', pkg), { recursive: true })
    .map(String)
    .filter((f) => /\.(node|wasm)$/.test(f) && !f.startsWith('node_modules'));
}

/** A user's stack, the same in both projects. */
const stackSource = `// A user's stack: one schema on every ClickHouse pod of the sandbox.
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
`;

before(async () => {
  sandbox = startSandbox(dir, 2);
  release = packRelease(work);
  registry = await startRegistry([release.main.tarball, ...release.platforms.values()]);

  // The two installs run side by side (they share npm's cache); each is a
  // user's fresh project.
  await Promise.all(Object.entries(projects).map(([flavour, project]) => install(flavour, project)));
});

/**
 * The commands of README's Install section: its `sh` blocks, each a list of
 * argument vectors (backslash continuations joined). Block 0 is the plain
 * install, block 1 the WebAssembly one.
 */
function readmeInstallBlocks() {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const section = readme.slice(
    readme.indexOf('\n## Install\n'),
    readme.indexOf('\n## ', readme.indexOf('\n## Install\n') + 1),
  );
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) =>
    m[1]
      .replace(/\\\n\s*/g, ' ')
      .split('\n')
      .filter((line) => line.trim())
      .map((line) => line.trim().split(/\s+/)),
  );
}

async function install(flavour, project) {
  mkdirSync(project, { recursive: true });
  const [plain, wasm] = readmeInstallBlocks();
  // A user's fresh project, then README's commands: the overrides, then the
  // install (with --cpu=wasm32 for the WebAssembly one).
  const commands = [
    ['npm', 'init', '-y'],
    ...plain.filter((c) => c[1] === 'pkg'),
    ...(flavour === 'wasm' ? wasm : plain.filter((c) => c[1] === 'install')),
  ];
  assert.ok(
    commands.length >= 3 && commands.every(([cmd]) => cmd === 'npm'),
    `README's Install commands: ${JSON.stringify(commands)}`,
  );
  for (const [cmd, ...args] of commands) {
    // From the local registry; quiet, and from npm's cache where it can.
    const extra =
      args[0] === 'install'
        ? [`--registry=${registry.url}`, '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error']
        : [];
    await runAsync(cmd, [...args, ...extra], { cwd: project, env: userEnv, timeout });
  }
  writeFileSync(join(project, 'stack.mjs'), stackSource);
}

after(async () => {
  await registry?.close();
  stopSandbox(dir);
  rmSync(work, { recursive: true, force: true });
});

describe('installed by name from a registry into fresh projects', { timeout }, () => {
  test('the released main package declares every platform package at its own version', () => {
    const expected = Object.fromEntries([...release.platforms.keys()].map((p) => [`${name}-${p}`, version]));
    assert.equal(
      Object.keys(expected).length,
      JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).napi.targets.length,
    );
    assert.deepEqual(release.main.manifest.optionalDependencies, expected);
    // and the WebAssembly one is skipped unless asked for.
    const wasm = JSON.parse(run('tar', ['-xOzf', release.platforms.get('wasm32-wasi'), 'package/package.json']));
    assert.deepEqual(wasm.cpu, ['wasm32']);
  });

  test('the main package carries no binary; npm installs the one platform package that fits', () => {
    assert.deepEqual(binaries(projects.native, name), []);
    assert.deepEqual(platformPackages(projects.native), [`${name}-linux-x64-gnu`]);
    assert.deepEqual(binaries(projects.native, `${name}-linux-x64-gnu`), ['clickhouse-schema.linux-x64-gnu.node']);
    assert.deepEqual(platformPackages(projects.wasm), [`${name}-wasm32-wasi`]);
    assert.deepEqual(binaries(projects.wasm, `${name}-wasm32-wasi`), ['clickhouse-schema.wasm32-wasi.wasm']);
    // The WebAssembly build's Kubernetes client comes with its package only.
    assert.ok(
      !existsSync(join(projects.native, 'node_modules', '@kubernetes', 'client-node')),
      'a native project has no @kubernetes/client-node',
    );
    assert.ok(
      existsSync(join(projects.wasm, 'node_modules', '@kubernetes', 'client-node')),
      'the WebAssembly project has @kubernetes/client-node',
    );
    // npm found them through the registry, as it would on npmjs.com.
    assert.ok(registry.requested.has(`${name}-linux-x64-gnu`));
    assert.ok(registry.requested.has(`${name}-wasm32-wasi`));
  });

  test('no Rust toolchain is reachable from the projects', () => {
    const r = spawnSync('sh', ['-c', 'command -v cargo || command -v rustc'], { env: userEnv, encoding: 'utf8' });
    assert.notEqual(r.status, 0, `found ${r.stdout}`);
  });

  for (const [flavour, binding] of [
    ['native', 'native'],
    // No switch set: the loader finds no native package and takes the WASI one.
    ['wasm', 'wasm32-wasi'],
  ]) {
    test(`the ${flavour} project deploys the stack to every pod with the ${binding} addon, and destroys it`, async () => {
      const project = projects[flavour];
      const deployed = await runAsync('node', ['stack.mjs', 'deploy', sandbox.kubeconfig], {
        cwd: project,
        env: userEnv,
      });
      assert.match(deployed, new RegExp(`^BINDING ${binding}$`, 'm'), 'the binding under test was loaded');
      const outputs = JSON.parse(/^RESULT (.*)$/m.exec(deployed)[1]);
      assert.deepEqual(outputs.podNames, pods);
      for (const pod of pods) {
        assert.deepEqual(sandbox.tablesOn(pod, 'shop'), ['orders'], pod);
      }
      await runAsync('node', ['stack.mjs', 'destroy', sandbox.kubeconfig], { cwd: project, env: userEnv });
      for (const pod of pods) {
        assert.equal(sandbox.query(pod, "SELECT count() FROM system.databases WHERE name = 'shop'"), '0', pod);
      }
    });
  }
});
