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
// Then what a user does next: a second `npm install` in each project, an
// import with the platform package gone, and the real `alchemy` CLI on a
// Node 22 from npm (`npx -p node@22`, README's way) in the native project:
// README's `alchemy.run.ts` deployed, a failing statement, drift after a
// table dropped by hand, its repair, and destroy, each command timed.
// Nothing of this repository is on the projects' module path.
import { after, before, describe, test } from './lib/engine.mjs';
import { test as nodeTest } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';
import { startRegistry } from './lib/npm-registry.mjs';
import { packRelease } from './lib/release.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// See tests/lib/sandbox-dir.mjs.
const dir = sandboxDir('install');
// The deploys run once more on a sandbox of the 26.9 engine (README, "The second engine"): the
// packages step runs this file once, whatever SANDBOX_ENGINE says, so both sandboxes are named.
const modernDir = sandboxDir('install-modern');
const work = mkdtempSync(join(tmpdir(), 'ch-schema-install-'));
const projects = { native: join(work, 'native'), wasm: join(work, 'wasm') };
// npm install of alchemy is large; a hang must still fail the test.
const timeout = 600_000;
let sandbox;
let modernSandbox;
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
  sandbox = startSandbox(dir, 2, { engine: '18.16' });
  modernSandbox = startSandbox(modernDir, 2, { engine: 'modern' });
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

/**
 * README's `alchemy.run.ts` (the first `ts` block of "The Alchemy provider"),
 * pointed at the sandbox: its namespace and pod selector. The cluster comes
 * from KUBECONFIG, as README says.
 */
function readmeStack() {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const from = readme.indexOf('\n## The Alchemy provider\n');
  const block = /```ts\n([\s\S]*?)```/.exec(readme.slice(from))[1];
  assert.match(block, /^export default Alchemy\.Stack\(/m, "README's example is a CLI entry point");
  const pointed = block
    .replace("namespace: 'example-observability'", "namespace: 'sandbox'")
    .replace("{ 'clickhouse.altinity.com/chi': 'orders' }", "{ 'clickhouse.altinity.com/chi': 'sandbox' }");
  assert.equal((pointed.match(/'sandbox'/g) ?? []).length, 2, 'namespace and selector replaced');
  return pointed;
}

after(async () => {
  await registry?.close();
  stopSandbox(dir);
  stopSandbox(modernDir);
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

  test('every file the source maps name is in the package (stack frames point at shipped sources)', () => {
    const installed = join(projects.native, 'node_modules', name);
    const maps = readdirSync(join(installed, 'dist'), { recursive: true })
      .map(String)
      .filter((f) => f.endsWith('.js.map'));
    assert.ok(maps.length >= 4, `source maps: ${maps}`);
    for (const map of maps) {
      const dir = dirname(join(installed, 'dist', map));
      for (const source of JSON.parse(readFileSync(join(installed, 'dist', map), 'utf8')).sources) {
        assert.ok(existsSync(join(dir, source)), `${map} names ${source}`);
      }
    }
  });

  test('no Rust toolchain is reachable from the projects', () => {
    const r = spawnSync('sh', ['-c', 'command -v cargo || command -v rustc'], { env: userEnv, encoding: 'utf8' });
    assert.notEqual(r.status, 0, `found ${r.stdout}`);
  });

  for (const [flavour, binding, engine] of [
    ['native', 'native', '18.16'],
    // No switch set: the loader finds no native package and takes the WASI one.
    ['wasm', 'wasm32-wasi', '18.16'],
    ['native', 'native', '26.9'],
    ['wasm', 'wasm32-wasi', '26.9'],
  ]) {
    nodeTest(`the ${flavour} project deploys the stack to every pod with the ${binding} addon, and destroys it [${engine}]`, async () => {
      const project = projects[flavour];
      const on = engine === '26.9' ? modernSandbox : sandbox;
      const deployed = await runAsync('node', ['stack.mjs', 'deploy', on.kubeconfig], {
        cwd: project,
        env: userEnv,
      });
      assert.match(deployed, new RegExp(`^BINDING ${binding}$`, 'm'), 'the binding under test was loaded');
      const outputs = JSON.parse(/^RESULT (.*)$/m.exec(deployed)[1]);
      assert.deepEqual(outputs.podNames, pods);
      for (const pod of pods) {
        assert.deepEqual(on.tablesOn(pod, 'shop'), ['orders'], pod);
      }
      await runAsync('node', ['stack.mjs', 'destroy', on.kubeconfig], { cwd: project, env: userEnv });
      for (const pod of pods) {
        assert.equal(on.query(pod, "SELECT count() FROM system.databases WHERE name = 'shop'"), '0', pod);
      }
    });
  }

  test('a second npm install in each project succeeds (README pins exactly, so no override conflicts)', async () => {
    for (const [flavour, project] of Object.entries(projects)) {
      // The WebAssembly project stands for a machine without a native package: it stays one.
      const cpu = flavour === 'wasm' ? ['--cpu=wasm32'] : [];
      const out = await runAsync('npm', ['install', ...cpu, `--registry=${registry.url}`, '--no-audit', '--no-fund', '--prefer-offline'], {
        cwd: project,
        env: userEnv,
      });
      assert.doesNotMatch(out, /EOVERRIDE/);
      const { dependencies, overrides } = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8'));
      assert.equal(dependencies.effect, overrides.effect, 'effect saved as exactly the override');
      assert.equal(dependencies['@effect/platform-node'], overrides['@effect/platform-node']);
    }
    assert.deepEqual(platformPackages(projects.native), [`${name}-linux-x64-gnu`]);
    assert.deepEqual(platformPackages(projects.wasm), [`${name}-wasm32-wasi`]);
  });

  /** Imports the package in `project` as a user would; it must fail: what it printed. */
  const failedImport = (project) => {
    const r = spawnSync('node', ['--input-type=module', '-e', `await import('${name}')`], {
      cwd: project,
      env: userEnv,
      encoding: 'utf8',
    });
    assert.notEqual(r.status, 0, 'the import failed');
    return r.stderr;
  };

  test('without its platform package (or with a broken one), the import names the package and the command that installs it', async () => {
    const pkg = join(projects.native, 'node_modules', `${name}-linux-x64-gnu`);
    const aside = `${pkg}.aside`;
    renameSync(pkg, aside);
    try {
      const stderr = failedImport(projects.native);
      assert.match(stderr, new RegExp(`the package with this machine's binary, ${name}-linux-x64-gnu, is not installed`));
      assert.match(stderr, new RegExp(`Install it: npm install ${name}-linux-x64-gnu@${version.replace(/\./g, '\\.')}`));
      assert.doesNotMatch(stderr, /npm has a bug|Cannot find native binding/);
    } finally {
      renameSync(aside, pkg);
    }
    // A platform package whose binary does not load: the loader's reason, and how to reinstall.
    const binary = join(pkg, 'clickhouse-schema.linux-x64-gnu.node');
    renameSync(binary, `${binary}.aside`);
    writeFileSync(binary, 'not a shared object');
    try {
      const stderr = failedImport(projects.native);
      assert.match(stderr, new RegExp(`${name}-linux-x64-gnu is installed but its binary did not load \\([^)]*clickhouse-schema\\.linux-x64-gnu\\.node: `));
      assert.match(stderr, new RegExp(`reinstall it \\(npm install ${name}-linux-x64-gnu@`));
    } finally {
      renameSync(`${binary}.aside`, binary);
    }
    // The WebAssembly project with its binary gone: that package is named, and how to reinstall it.
    const wasm = join(projects.wasm, 'node_modules', `${name}-wasm32-wasi`, 'clickhouse-schema.wasm32-wasi.wasm');
    renameSync(wasm, `${wasm}.aside`);
    try {
      const stderr = failedImport(projects.wasm);
      assert.match(stderr, new RegExp(`the WebAssembly build \\(${name}-wasm32-wasi\\) is installed but did not load`));
      assert.match(stderr, new RegExp(`reinstall it \\(npm install --cpu=wasm32 ${name}-wasm32-wasi@`));
      assert.doesNotMatch(stderr, /npm has a bug/);
    } finally {
      renameSync(`${wasm}.aside`, wasm);
    }
  });
});

/**
 * The real `alchemy` CLI in the native project, as README says to run it on
 * a Node 20 machine: `npx -p node@22 alchemy ...` (Node 22 comes from the
 * registry's `node` package). Deploys run in a terminal (through `script`), so
 * the CLI draws its live view as for a user at a prompt, and the text is read
 * with the terminal's escape sequences removed; the other commands run as in
 * CI, without one (a terminal would make `drift` ask before it repairs).
 * `DO_NOT_TRACK=1` (README) spares each command Alchemy's telemetry.
 */
describe('the alchemy CLI on Node 22 in the native project', { timeout }, () => {
  const file = () => join(projects.native, 'alchemy.run.ts');
  const table = (pod) => sandbox.tablesOn(pod, 'orders');
  const timings = [];
  let cliEnv;
  let readme;

  before(() => {
    // README's stack, one pod at a time: each pod count stays on screen for
    // at least a statement's run, so the live view is sure to draw it.
    readme = readmeStack().replace('statements: [', 'parallelism: 1,\n      statements: [');
    writeFileSync(file(), readme);
    cliEnv = {
      ...userEnv,
      KUBECONFIG: sandbox.kubeconfig,
      DO_NOT_TRACK: '1',
      // npx fetches node@22 through the same registry as the installs.
      npm_config_registry: registry.url,
      TERM: 'xterm-256color',
      COLUMNS: '160',
      LINES: '50',
    };
  });

  after(() => {
    console.log(`alchemy CLI command times:\n${timings.map(([c, ms]) => `  ${c}: ${(ms / 1000).toFixed(1)} s`).join('\n')}`);
  });

  /**
   * A user's environment at a prompt: CI machines (this test's own among them)
   * set `CI`, and the CLI then prints plain log lines instead of its live view.
   */
  const atPrompt = (env) => {
    const prompt = { ...env };
    delete prompt.CI;
    return prompt;
  };

  /**
   * Runs `alchemy <args>` (in a terminal when `terminal`); resolves to
   * whether it succeeded and what it printed, escape sequences removed.
   */
  async function alchemy(args, { terminal = false } = {}) {
    const command = ['npx', '-y', '-p', 'node@22', '--', 'alchemy', ...args.split(' ')];
    const [cmd, ...argv] = terminal ? ['script', '-qefc', command.join(' '), '/dev/null'] : command;
    const started = Date.now();
    let ok = true;
    let raw;
    try {
      raw = await runAsync(cmd, argv, { cwd: projects.native, env: terminal ? atPrompt(cliEnv) : cliEnv });
    } catch (err) {
      ok = false;
      raw = err.message;
    }
    timings.push([`alchemy ${args}${terminal ? ' (terminal)' : ''}`, Date.now() - started]);
    const text = raw
      // OSC (titles, progress) and CSI sequences, then carriage returns.
      .replace(/\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)/g, '')
      .replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, '')
      .replace(/\r/g, '\n');
    return { ok, text };
  }

  test("deploy --yes: README's stack on every pod, the live view's pod count moving as pods finish", async () => {
    const { ok, text } = await alchemy('deploy --yes', { terminal: true });
    assert.ok(ok, text);
    for (const pod of pods) assert.deepEqual(table(pod), ['totals'], pod);
    // A pod's statements go in one exec, so their progress lines follow each other within
    // milliseconds and a frame of the live view may catch none of them; the count of pods done
    // moves once per pod.
    assert.match(text, /chi-sandbox-sandbox-0-[01]-0 done \(1 of 2 pods done\)/);
    assert.match(text, /✓ orders-schema \(ClickHouse\.Schema\) · applied to 2 pod\(s\) created/);
    assert.doesNotMatch(text, /INFO|ClickHouseSchema 'orders-schema': applied/, 'no log line drawn across the live view');
  });

  test("a failing statement: one numbering in progress and error, the server's words kept, no stack frames", async () => {
    // A stray word in a column list: ClickHouse answers with the tokens it expected.
    writeFileSync(file(), readme.replace("ORDER BY day',", "ORDER BY day',\n        'CREATE TABLE IF NOT EXISTS orders.broken (id UInt64 NOT)',"));
    const { ok, text } = await alchemy('deploy --yes', { terminal: true });
    assert.ok(!ok, text);
    // The progress lines a frame catches of the pod's script (it may catch none: the script
    // fails within milliseconds) are numbered as the error numbers statements: no statement 3 below.
    assert.match(text, /error: ClickHouseSchema 'orders-schema': statement 2 failed on pod chi-sandbox-sandbox-0-0-0\n\s*with ClickHouse code 62/);
    // The live view's failed row shows the error's first line: who failed
    // where, whole, on one line of the terminal, without the server's words.
    // (A first line of over ~125 characters was wrapped by the CLI into the
    // status column, which cut the row in two.)
    const row = text.split('\n').find((line) => line.includes('orders-schema (ClickHouse.Schema)') && line.includes('failed on pod'));
    assert.ok(row, `no failed row in the live view:\n${text}`);
    assert.match(row, /ClickHouseSchema 'orders-schema': statement 2 failed on pod chi-sandbox-sandbox-0-0-0\s+fail\b/, row);
    assert.ok(row.trimEnd().length <= Number(cliEnv.COLUMNS), `the row is wider than the terminal: ${row}`);
    assert.doesNotMatch(text, /statement 3/, 'no statement numbered from 1');
    // ClickHouse's list of expected tokens survives redaction whole.
    assert.match(text, /Expected one of: COMMENT, DEFAULT, MATERIALIZED, ALIAS, ClosingRoundBracket, Comma, token\n/);
    // The message alone: none of the addon's or Alchemy's stack frames.
    assert.doesNotMatch(text, /src\/index\.ts|node_modules\/|\n\s+at /);
    assert.deepEqual(table(pods[0]), ['totals'], 'the failed statement created nothing');
  });

  test("after a failed deploy, drift is blind until a deploy succeeds (README says so); then it names the object and pod, and --repair restores it", async () => {
    sandbox.query(pods[1], 'DROP TABLE orders.totals');
    // Alchemy keeps the resource "updating" and its drift check skips it.
    const blind = await alchemy('drift');
    assert.ok(blind.ok, blind.text);
    assert.match(blind.text, /Plan: no changes/);
    assert.doesNotMatch(blind.text, /drift: orders\.totals/);

    // README's way out: deploy, here with the statement fixed (removed). It says once that nothing ran.
    writeFileSync(file(), readme);
    const revert = await alchemy('deploy --yes');
    assert.ok(revert.ok, revert.text);
    assert.match(revert.text, /\[orders-schema\] updated — unchanged, no statement ran/);
    assert.doesNotMatch(revert.text, /ClickHouseSchema 'orders-schema': unchanged/);

    const drift = await alchemy('drift');
    assert.ok(drift.ok, drift.text);
    assert.match(drift.text, new RegExp(`WARN .*ClickHouseSchema 'orders-schema': drift: orders\\.totals missing on ${pods[1]} \\(statement 1\\)`));
    assert.doesNotMatch(drift.text, new RegExp(`missing on ${pods[0]}`));
    assert.match(drift.text, /Plan: 1 to update/);
    assert.deepEqual(table(pods[1]), [], 'a drift check changes nothing');

    const repaired = await alchemy('drift --repair');
    assert.ok(repaired.ok, repaired.text);
    assert.match(repaired.text, /\[orders-schema\] updated — applied to 1 pod\(s\)/);
    assert.deepEqual(table(pods[1]), ['totals']);
  });

  test("destroy --yes under onDelete 'retain' (README's default) says so and keeps the tables", async () => {
    const { ok, text } = await alchemy('destroy --yes');
    assert.ok(ok, text);
    assert.match(text, /\[orders-schema\] deleted — retained \(onDelete 'retain'\): nothing ran, the tables are kept/);
    for (const pod of pods) assert.deepEqual(table(pod), ['totals'], pod);
  });
});
