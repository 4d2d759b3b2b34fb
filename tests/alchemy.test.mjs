// The Alchemy provider end to end: Alchemy's own deploy and destroy (the
// library API, as from a Node 20 script) of a stack holding a ClickHouseSchema
// ordered after an upstream resource through readyBarrier, against the
// sandbox's real ClickHouse servers. What reached the cluster is read from the
// sandbox's API and exec logs; what the schema did, by querying each pod.
import { after, before, describe, test } from './lib/engine.mjs';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';
import { batchStatements, runBatch, statementLog } from './lib/batch.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// Alchemy's local state lives under process.cwd() as it is when alchemy is
// first imported, so this file moves to a temp dir before importing it.
const stateRoot = mkdtempSync(join(tmpdir(), 'alchemy-ch-test-'));
process.chdir(stateRoot);
const Alchemy = await import('alchemy');
const Output = await import('alchemy/Output');
const Provider = await import('alchemy/Provider');
const { Resource } = await import('alchemy/Resource');
const Kubernetes = await import('alchemy/Kubernetes');
const Effect = await import('effect/Effect');
const Layer = await import('effect/Layer');
const { deployStack, destroyStack, driftStack } = await import('../dist/examples/runtime.js');
const { addonTarget, clickHouseSchema, clickHouseSchemaExecutor, clickHouseSchemaProvider, isClickHouseSchemaError } =
  await import('../dist/index.js');
const { assertsTheAddonBuild } = await import('./binding.mjs');

assertsTheAddonBuild(addonTarget);

// See tests/lib/sandbox-dir.mjs.
const dir = sandboxDir('alchemy');
// A hang must fail the test rather than stall the suite.
const timeout = 120_000;
const STAGE = 'test';
let sandbox;

before(() => {
  sandbox = startSandbox(dir, 3);
});

after(() => {
  stopSandbox(dir);
  process.chdir(root);
  rmSync(stateRoot, { recursive: true, force: true });
});

const S0 = 'CREATE DATABASE IF NOT EXISTS orders';
const S1 = 'CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime, payload String) ENGINE = MergeTree ORDER BY at';
const S2 = 'CREATE TABLE IF NOT EXISTS orders.customers (id UUID, name String) ENGINE = MergeTree ORDER BY id';

/** A stack `name` with an upstream Random feeding the schema `id`'s readyBarrier. */
function stack(name, id, props) {
  return Alchemy.Stack(
    name,
    { providers: Layer.mergeAll(clickHouseSchemaProvider, Alchemy.RandomProvider()), state: Alchemy.localState() },
    Effect.gen(function* () {
      const upstream = yield* Alchemy.Random('upstream', { bytes: 8 });
      const schema = yield* clickHouseSchema(id, {
        readyBarrier: Output.map(Output.of(upstream), () => true),
        target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
        kubeConfig: { kubeconfigPath: sandbox.kubeconfig },
        retry: { maxAttempts: 2, backoffMs: 100 },
        waitForPod: { timeoutMs: 30_000 },
        // The deploys below count every exec; the drift test turns the check on.
        verify: 'off',
        ...props,
      });
      return { fingerprint: schema.fingerprint, podNames: schema.podNames, pods: schema.pods, clusterId: schema.clusterId };
    }),
  );
}

const stateOf = (name, id) => {
  const file = join(stateRoot, '.alchemy/state', name, STAGE, `${id}.json`);
  return existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : undefined;
};

/** Runs `step` with fresh sandbox logs; resolves to its result and what reached the cluster. */
async function measured(step) {
  await sandbox.clearLogs();
  const result = await step();
  const api = await sandbox.control('GET', '/sandbox/api-log');
  const execs = await sandbox.control('GET', '/sandbox/exec-log');
  return {
    result,
    api,
    podLists: api.filter((r) => r.method === 'GET' && r.path.endsWith('/pods')).length,
    execs,
  };
}

/** Runs `step` with stdout and stderr captured; resolves to its outcome and the text. */
async function logged(step) {
  const lines = [];
  const capture = (write) => (chunk, ...rest) => {
    lines.push(String(chunk));
    return write(chunk, ...rest);
  };
  const [out, err] = [process.stdout.write, process.stderr.write];
  process.stdout.write = capture(out.bind(process.stdout));
  process.stderr.write = capture(err.bind(process.stderr));
  try {
    return { outcome: await step().then((value) => ({ value }), (error) => ({ error })), text: lines.join('') };
  } finally {
    process.stdout.write = out;
    process.stderr.write = err;
  }
}

async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  assert.fail('expected a rejection');
}

describe('clickHouseSchema through Alchemy deploy/destroy (fanout, sandbox)', () => {
  const NAME = 'e2e';
  const ID = 'orders-schema';
  let pods;
  let newPod;

  test('an invalid config fails at declaration with the Rust message, before anything reaches state', { timeout }, async () => {
    const err = await rejection(deployStack(stack('invalid', ID, { statements: [S0], onDelete: 'run' }), STAGE));
    assert.ok(isClickHouseSchemaError(err), `got ${err?.stack ?? err}`);
    assert.equal(err.code, 'E_INVALID_CONFIG');
    assert.match(err.message, /orders-schema/);
    assert.match(err.message, /deleteStatements/);
    assert.equal(stateOf('invalid', ID), undefined);
  });

  test('create: every pod gets the tables; outputs carry no kubeConfig and readyBarrier persists as true', { timeout }, async () => {
    pods = sandbox.info.pods;
    const { outcome, text } = await logged(() => measured(() => deployStack(stack(NAME, ID, { statements: [S0, S1] }), STAGE)));
    assert.ifError(outcome.error);
    const { result, execs } = outcome.value;
    // The provider's progress notes: the row's settle lines (as it settles, and in the summary) keep the last one.
    const settled = text.split('\n').filter((line) => line.includes(`[${ID}] created`));
    assert.ok(settled.length >= 1, 'a settle line');
    for (const line of settled) assert.match(line, /\[orders-schema\] created — applied to 3 pod\(s\)/);
    assert.deepEqual(result.podNames, [...pods].sort());
    assert.equal(execs.length, pods.length, 'one exec per pod');
    assert.equal(statementLog(execs).length, 2 * pods.length);
    for (const pod of pods) assert.deepEqual(sandbox.tablesOn(pod, 'orders'), ['events']);
    const state = stateOf(NAME, ID);
    assert.equal(state.status, 'created');
    assert.equal(state.props.readyBarrier, true);
    assert.equal(state.props.executor, undefined);
    assert.equal(JSON.stringify(state.attr).includes('kubeconfig'), false);
    assert.equal(state.attr.statementCount, 2);
    assert.equal(state.attr.pods.length, pods.length);
  });

  test('no-op: an unchanged deploy costs exactly one pod list and no exec', { timeout }, async () => {
    const before = stateOf(NAME, ID);
    const { podLists, api, execs } = await measured(() => deployStack(stack(NAME, ID, { statements: [S0, S1] }), STAGE));
    assert.equal(podLists, 1, JSON.stringify(api));
    assert.equal(api.length, 1, JSON.stringify(api));
    assert.equal(execs.length, 0);
    assert.equal(stateOf(NAME, ID).attr.appliedAt, before.attr.appliedAt);
  });

  test('scale-out: a pod added between deploys gets the statements, and only it', { timeout }, async () => {
    const added = await sandbox.control('POST', '/sandbox/pods', {});
    newPod = added.name;
    assert.deepEqual(sandbox.tablesOn(newPod, 'orders'), []);
    const { result, execs } = await measured(() => deployStack(stack(NAME, ID, { statements: [S0, S1] }), STAGE));
    assert.deepEqual(
      execs.map((e) => e.pod),
      [newPod],
    );
    assert.deepEqual(statementLog(execs).map((e) => e.stdin), [S0, S1]);
    assert.deepEqual(sandbox.tablesOn(newPod, 'orders'), ['events']);
    assert.deepEqual(result.podNames, [...pods, newPod].sort());
    pods = [...pods, newPod];
  });

  test('a statement added: every pod runs the whole list', { timeout }, async () => {
    const { execs } = await measured(() => deployStack(stack(NAME, ID, { statements: [S0, S1, S2] }), STAGE));
    assert.equal(execs.length, pods.length, 'one exec per pod');
    for (const pod of pods) {
      assert.equal(statementLog(execs).filter((e) => e.pod === pod).length, 3, pod);
      assert.deepEqual(sandbox.tablesOn(pod, 'orders'), ['customers', 'events']);
    }
    assert.equal(stateOf(NAME, ID).attr.statementCount, 3);
  });

  const BAD = 'CREATE TABLE IF NOT EXISTS nowhere.t (x UInt8) ENGINE = Memory';
  const FIXED = 'CREATE TABLE IF NOT EXISTS orders.fixed (x UInt8) ENGINE = Memory';

  test('an SQL failure rejects the deploy with the ClickHouseSchemaError intact; state keeps the old fingerprint', { timeout }, async () => {
    const before = stateOf(NAME, ID);
    const err = await rejection(deployStack(stack(NAME, ID, { statements: [S0, S1, S2, BAD] }), STAGE));
    assert.ok(isClickHouseSchemaError(err), `got ${err?.stack ?? err}`);
    assert.equal(err.code, 'E_STATEMENT_FAILED');
    assert.equal(err._tag, 'ClickHouseSchemaError', 'catchTag-able inside Effect programs');
    assert.equal(err.resourceId, ID);
    assert.equal(err.statementIndex, 3);
    assert.ok(pods.includes(err.pod), err.pod);
    assert.equal(err.clickHouseCode, 81);
    assert.equal(err.message.includes('nowhere.t'), false, 'the statement text is not on the error');
    // Marked for Alchemy's CLI as written for the user: it prints the message alone, no stack frames.
    assert.equal(err[Symbol.for('alchemy/UserFacingError')], true);
    assert.equal(Object.keys(err).some((k) => /UserFacing/.test(k)), false, "the addon's own properties as they were");
    assert.equal(stateOf(NAME, ID).attr.fingerprint, before.attr.fingerprint);
  });

  test('recovery: the fixed statement deploys, on every pod', { timeout }, async () => {
    const before = stateOf(NAME, ID);
    const { execs } = await measured(() => deployStack(stack(NAME, ID, { statements: [S0, S1, S2, FIXED] }), STAGE));
    assert.equal(execs.length, pods.length, 'one exec per pod');
    assert.equal(statementLog(execs).length, 4 * pods.length);
    for (const pod of pods) assert.deepEqual(sandbox.tablesOn(pod, 'orders'), ['customers', 'events', 'fixed']);
    const after = stateOf(NAME, ID);
    assert.equal(after.status, 'updated');
    assert.notEqual(after.attr.fingerprint, before.attr.fingerprint);
    assert.equal(after.attr.statementCount, 4);
  });

  test("destroy with onDelete 'retain': no cluster call, the data stays, the state is gone", { timeout }, async () => {
    const { outcome, text } = await logged(() =>
      measured(() => destroyStack(stack(NAME, ID, { statements: [S0, S1, S2, FIXED] }), STAGE)),
    );
    assert.ifError(outcome.error);
    const { api, execs } = outcome.value;
    assert.equal(api.length, 0, JSON.stringify(api));
    assert.equal(execs.length, 0);
    // Alchemy says "deleted"; the row's note says what that meant.
    assert.match(text, /\[orders-schema\] deleted — retained \(onDelete 'retain'\): nothing ran, the tables are kept/);
    for (const pod of pods) assert.deepEqual(sandbox.tablesOn(pod, 'orders'), ['customers', 'events', 'fixed']);
    assert.equal(stateOf(NAME, ID), undefined);
  });

  test("destroy with onDelete 'run': the delete statements run on every pod", { timeout }, async () => {
    const props = {
      statements: ['CREATE DATABASE IF NOT EXISTS scratch', 'CREATE TABLE IF NOT EXISTS scratch.t (x UInt8) ENGINE = Memory'],
      onDelete: 'run',
      deleteStatements: ['DROP TABLE IF EXISTS scratch.t', 'DROP DATABASE IF EXISTS scratch'],
    };
    await deployStack(stack('e2e-run', 'scratch-schema', props), STAGE);
    for (const pod of pods) assert.deepEqual(sandbox.tablesOn(pod, 'scratch'), ['t']);
    const { outcome, text } = await logged(() => measured(() => destroyStack(stack('e2e-run', 'scratch-schema', props), STAGE)));
    assert.ifError(outcome.error);
    const { execs } = outcome.value;
    assert.equal(execs.length, pods.length, 'one exec per pod');
    assert.match(text, new RegExp(`\\[scratch-schema\\] deleted — ran deleteStatements on ${pods.length} pod\\(s\\)`));
    for (const pod of pods) {
      assert.deepEqual(
        statementLog(execs).filter((e) => e.pod === pod).map((e) => e.stdin.trim()),
        props.deleteStatements,
      );
      assert.equal(sandbox.query(pod, "SELECT count() FROM system.databases WHERE name = 'scratch'"), '0');
    }
    assert.equal(stateOf('e2e-run', 'scratch-schema'), undefined);
  });

  test('examples/full: the upstream, then the materialized view on every pod; destroy runs its delete statements', { timeout }, async () => {
    process.env.SANDBOX_KUBECONFIG = sandbox.kubeconfig; // read by the example when imported
    const { stack: full } = await import('../dist/examples/full/stack.js');
    const outputs = await deployStack(full, STAGE);
    assert.deepEqual(outputs.podNames, [...pods].sort());
    for (const pod of pods) assert.deepEqual(sandbox.tablesOn(pod, 'analytics'), ['daily', 'daily_mv', 'events']);
    const state = stateOf('full', 'analytics-schema');
    assert.equal(state.props.readyBarrier, true);
    assert.equal(state.props.settings.max_execution_time, 60);
    await destroyStack(full, STAGE);
    for (const pod of pods) assert.deepEqual(sandbox.tablesOn(pod, 'analytics'), []);
    assert.equal(stateOf('full', 'analytics-schema'), undefined);
  });
});

describe('alchemy drift sees the live schema (fanout, sandbox)', () => {
  const NAME = 'e2e-drift';
  const ID = 'drift-schema';
  const statements = [
    'CREATE DATABASE IF NOT EXISTS drifted',
    'CREATE TABLE IF NOT EXISTS drifted.events (id UUID, at DateTime) ENGINE = MergeTree ORDER BY at',
    'CREATE TABLE IF NOT EXISTS drifted.customers (id UUID, name String) ENGINE = MergeTree ORDER BY id',
  ];
  const providers = () => Layer.mergeAll(clickHouseSchemaProvider, Alchemy.RandomProvider());
  const actionOf = (result) => Object.values(result.resources).find((r) => r.logicalId === ID)?.action;

  test('a table dropped by hand on one pod is drift, and the repair re-runs the statements on that pod only', { timeout }, async () => {
    await deployStack(stack(NAME, ID, { statements, verify: 'fail' }), STAGE);
    assert.equal(actionOf(await driftStack(NAME, STAGE, providers())), 'unchanged');

    // The pods as recorded now (an earlier test may have added one to the sandbox).
    const recordedPods = stateOf(NAME, ID).attr.podNames;
    const [, victim] = recordedPods;
    sandbox.query(victim, 'DROP TABLE drifted.customers');
    const { outcome, text } = await logged(() => driftStack(NAME, STAGE, providers()));
    assert.ifError(outcome.error);
    assert.equal(actionOf(outcome.value), 'drifted');
    // What drifted, named: one line for the one object on the one pod.
    const lines = text.split('\n').filter((line) => line.includes(`ClickHouseSchema '${ID}': drift:`));
    assert.equal(lines.length, 1, text);
    assert.match(lines[0], new RegExp(`drift: drifted\\.customers missing on ${victim} \\(statement 2\\)$`));

    const { result, execs } = await measured(() => driftStack(NAME, STAGE, providers(), true));
    assert.equal(actionOf(result), 'repaired');
    // The repair's read looks at every pod (one check each); the statements ran on the victim only,
    // in one exec with the check after them.
    const isCheck = (e) => e.stdin.startsWith('CREATE DATABASE _clickhouse_schema_verify_');
    assert.deepEqual([...new Set(execs.filter((e) => !isCheck(e)).map((e) => e.pod))], [victim], 'only the pod that lacked the table');
    assert.equal(execs.filter((e) => !isCheck(e)).length, 1, 'one exec for its list');
    const ran = statementLog(execs.filter((e) => !isCheck(e)));
    assert.deepEqual(ran.map((e) => isCheck(e)), [...statements.map(() => false), true], 'its statements, then its check');
    assert.deepEqual(sandbox.tablesOn(victim, 'drifted'), ['customers', 'events']);
    assert.deepEqual(stateOf(NAME, ID).attr.podNames, recordedPods, 'the repaired state covers every pod again');
    assert.equal(actionOf(await driftStack(NAME, STAGE, providers())), 'unchanged');
  });
});

describe('clickHouseSchema through Alchemy with an injected executor (no cluster)', () => {
  /** A fake cluster: `pods` may change between deploys; `failNextList` makes the next listPods reject. */
  function fakeCluster(names) {
    const cluster = { pods: names.map((name) => ({ name, uid: `${name}-uid` })), lists: 0, execs: [], scripts: 0, failNextList: false };
    cluster.executor = {
      listPods: async () => {
        cluster.lists += 1;
        if (cluster.failNextList) {
          cluster.failNextList = false;
          throw new Error('connection reset by peer');
        }
        return cluster.pods.map((p) => ({ ...p, ready: true, phase: 'Running', containers: ['clickhouse'] }));
      },
      exec: async (request) => {
        // A pod's script (execMode 'perPod'): counted per statement, as it runs them, and per exec.
        const batch = batchStatements(request.stdin);
        if (batch) {
          cluster.scripts += 1;
          return runBatch(request, batch, () => undefined, (one) => cluster.execs.push(one.pod));
        }
        cluster.execs.push(request.pod);
        return { stdout: '', stderr: '', exitCode: 0 };
      },
    };
    return cluster;
  }

  const fakeStack = (name, cluster, props = {}) =>
    Alchemy.Stack(
      name,
      // The executor reaches the provider as a Layer, never through props.
      { providers: Layer.provide(clickHouseSchemaProvider, clickHouseSchemaExecutor(cluster.executor)), state: Alchemy.localState() },
      Effect.gen(function* () {
        const schema = yield* clickHouseSchema('fake-schema', {
          target: { namespace: 'ns', podSelector: { app: 'clickhouse' } },
          statements: ['CREATE DATABASE IF NOT EXISTS a ON CLUSTER c', 'CREATE DATABASE IF NOT EXISTS b ON CLUSTER c'],
          retry: { maxAttempts: 1, backoffMs: 0 },
          // The scripted executor counts every exec and cannot answer the live-schema check.
          verify: 'off',
          ...props,
        });
        return { podNames: schema.podNames };
      }),
    );

  test('the executor (a Layer) is used, and never reaches the recorded props', { timeout }, async () => {
    const cluster = fakeCluster(['p-0', 'p-1']);
    await deployStack(fakeStack('fake-runtime', cluster), STAGE);
    assert.deepEqual(cluster.execs.sort(), ['p-0', 'p-0', 'p-1', 'p-1']);
    // These statements run ON CLUSTER: an exec each, so each status table is read before the next.
    assert.equal(cluster.scripts, 0);
    const state = stateOf('fake-runtime', 'fake-schema');
    assert.equal('executor' in state.props, false);
    assert.deepEqual(state.attr.podNames, ['p-0', 'p-1']);
  });

  test('a failed no-op check does not hide a needed apply: the deploy reconciles and reaches the new pod', { timeout }, async () => {
    const cluster = fakeCluster(['p-0']);
    await deployStack(fakeStack('fake-probe', cluster), STAGE);
    cluster.pods.push({ name: 'p-1', uid: 'p-1-uid' });
    cluster.execs = [];
    cluster.lists = 0;
    cluster.failNextList = true; // the plan's pod list fails
    await deployStack(fakeStack('fake-probe', cluster), STAGE);
    assert.equal(cluster.lists, 3, "the plan's failed list, then apply's list and re-list");
    assert.deepEqual(cluster.execs, ['p-1', 'p-1']);
    assert.deepEqual(stateOf('fake-probe', 'fake-schema').attr.podNames, ['p-0', 'p-1']);
  });

  test('a statement holding a credential deploys, with a warning in the log naming it (and not repeating it)', { timeout }, async () => {
    const cluster = fakeCluster(['p-0']);
    const statements = [
      'CREATE DATABASE IF NOT EXISTS a',
      "CREATE TABLE IF NOT EXISTS a.raw (x String) ENGINE = S3('https://b.example/x.csv', 'AKIAEXAMPLE', 'sEcReT-value', 'CSV')",
    ];
    const { outcome, text } = await logged(() => deployStack(fakeStack('fake-credential', cluster, { statements }), STAGE));
    assert.ifError(outcome.error);
    const lines = text.split('\n');
    const warning = lines.filter((line) => line.includes('holds a credential literal'));
    assert.equal(warning.length, 1, `one warning, got:\n${text}`);
    assert.match(warning[0], /fake-schema/);
    assert.match(warning[0], /statements\[1\]/);
    assert.match(warning[0], /named collections/);
    assert.ok(!text.includes('sEcReT-value'), 'no log line repeats the secret');
    assert.equal(cluster.execs.length, 2, 'a warning, not an error: the deploy ran');
    // Honest about the state: the statement is a prop, and Alchemy keeps it verbatim.
    assert.ok(JSON.stringify(stateOf('fake-credential', 'fake-schema').props).includes('sEcReT-value'));
  });

  test('ClickHouseSchemaError is a tagged error: Effect.catchTag recovers from it', { timeout }, async () => {
    const { apply } = await import('../dist/index.js');
    const cluster = fakeCluster(['p-0']);
    const recovered = await Effect.runPromise(
      Effect.tryPromise({
        try: () => apply('fake-schema', { statements: [] }, undefined, { executor: cluster.executor }),
        catch: (e) => e,
      }).pipe(Effect.catchTag('ClickHouseSchemaError', (e) => Effect.succeed(e.code))),
    );
    assert.equal(recovered, 'E_INVALID_CONFIG');
  });

  test('onCluster: an unchanged deploy makes no cluster call at all', { timeout }, async () => {
    const cluster = fakeCluster(['p-0', 'p-1']);
    const props = { execution: { mode: 'onCluster', cluster: 'c' } };
    await deployStack(fakeStack('fake-oncluster', cluster, props), STAGE);
    assert.equal(cluster.execs.length, 2, 'run once, on one pod');
    cluster.lists = 0;
    cluster.execs = [];
    await deployStack(fakeStack('fake-oncluster', cluster, props), STAGE);
    assert.equal(cluster.lists, 0);
    assert.equal(cluster.execs.length, 0);
  });
});

describe("kubeConfig from Alchemy's Kubernetes connection (sandbox)", () => {
  const TARGET = { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } };
  const T1 = 'CREATE TABLE IF NOT EXISTS orders.via_adapter (id UInt64) ENGINE = MergeTree ORDER BY id';

  // A stand-in for a managed cluster resource (AWS.EKS.Cluster): its
  // attributes carry a connection without any credential; the adapter
  // registered for its auth kind mints the token when a call needs it.
  const SandboxCluster = Resource('Test.SandboxCluster');
  const clusterProvider = () =>
    Provider.succeed(SandboxCluster, {
      reconcile: ({ news }) =>
        Effect.sync(() => ({
          name: 'sandbox',
          connection: {
            endpoint: sandbox.info.server,
            certificateAuthorityData: caData(),
            auth: { kind: 'sandbox-cluster', user: news.user },
          },
        })),
      delete: () => Effect.void,
      read: ({ output }) => Effect.succeed(output),
    });
  const caData = () => /certificate-authority-data:\s*(\S+)/.exec(readFileSync(sandbox.kubeconfig, 'utf8'))[1];

  /** The adapter: what it mints is up to the test (`adapter.mode`); it counts its calls. */
  const adapter = { mode: 'minimal', mints: 0, kinds: [] };
  const tokenOf = (user) => ({ minimal: sandbox.info.tokens.minimal, admin: sandbox.info.tokens.admin, 'no-exec': sandbox.info.tokens.no_exec })[user];
  const adapterLayer = () =>
    Layer.succeed(Kubernetes.ClusterAdapter('sandbox-cluster'), {
      kind: 'Kubernetes.ClusterAdapter',
      connect: (connection) =>
        Effect.suspend(() => {
          adapter.mints += 1;
          adapter.kinds.push(connection.auth.kind);
          if (adapter.mode === 'fail') return Effect.fail(new Error('the cluster sandbox is being deleted'));
          const token = adapter.mode === 'wrong' ? WRONG_TOKEN : tokenOf(adapter.mode === 'rotate' ? 'admin' : connection.auth.user);
          return Effect.succeed({
            endpoint: connection.endpoint,
            certificateAuthorityData: connection.certificateAuthorityData,
            headers: Effect.succeed({ Authorization: `Bearer ${token}` }),
          });
        }),
    });
  const WRONG_TOKEN = 'wrong-token-4f1c2d9e8b7a6f5e';

  function connectionStack(name, user, { providers, kubeConfig, statements = [S0, T1] } = {}) {
    return Alchemy.Stack(
      name,
      {
        providers: providers ?? Layer.mergeAll(clickHouseSchemaProvider, clusterProvider(), adapterLayer()),
        state: Alchemy.localState(),
      },
      Effect.gen(function* () {
        const cluster = yield* SandboxCluster('cluster', { user });
        const schema = yield* clickHouseSchema('adapter-schema', {
          target: TARGET,
          // The whole cluster resource, as with Kubernetes.Deployment's `cluster`.
          kubeConfig: kubeConfig ?? cluster,
          statements,
          retry: { maxAttempts: 1, backoffMs: 0 },
          waitForPod: { timeoutMs: 30_000 },
          verify: 'off',
        });
        return { clusterId: schema.clusterId, podNames: schema.podNames };
      }),
    );
  }

  /** Every file under Alchemy's state directory, as one text. */
  const allState = () => spawnSync('grep', ['-r', '-h', '', join(stateRoot, '.alchemy')], { encoding: 'utf8' }).stdout;

  const secrets = () => [sandbox.info.tokens.minimal, sandbox.info.tokens.admin, sandbox.info.tokens.no_exec, WRONG_TOKEN];
  const assertNoSecret = (what, text) => {
    for (const secret of secrets()) assert.ok(!text.includes(secret), `${what} holds a token`);
  };

  test("the adapter's token is the one used: a user without exec fails the deploy with the API's 403", { timeout }, async () => {
    adapter.mode = 'token-of-user';
    const { outcome, text } = await logged(() => deployStack(connectionStack('conn', 'no-exec'), STAGE));
    assert.ok(outcome.error, 'the deploy failed');
    assert.equal(isClickHouseSchemaError(outcome.error), true, String(outcome.error));
    assert.equal(outcome.error.code, 'E_KUBERNETES_API');
    assert.match(outcome.error.message, /forbidden/);
    assert.match(outcome.error.message, /pods\/exec/);
    assertNoSecret('the error', JSON.stringify({ ...outcome.error, message: outcome.error.message }));
    assertNoSecret('the log', text);
    assert.equal(stateOf('conn', 'adapter-schema')?.attr, undefined, 'nothing recorded');
  });

  test("a cluster resource's connection deploys to every pod; no token in state, outputs or log; clusterId is server and CA", { timeout }, async () => {
    adapter.mints = 0;
    adapter.kinds = [];
    const { outcome, text } = await logged(() => deployStack(connectionStack('conn', 'minimal'), STAGE));
    assert.ifError(outcome.error);
    for (const pod of sandbox.info.pods) assert.ok(sandbox.tablesOn(pod, 'orders').includes('via_adapter'), pod);
    assert.ok(adapter.mints >= 1, 'the adapter was asked');
    assert.deepEqual([...new Set(adapter.kinds)], ['sandbox-cluster']);
    const state = stateOf('conn', 'adapter-schema');
    // The identity: cluster name (none), server, CA data, CA file (none), skip-TLS, as the
    // cluster identity's encoding pins them; no credential.
    const expected = createHash('sha256').update(`|${sandbox.info.server}|${caData()}||false`).digest('hex');
    assert.equal(state.attr.clusterId, expected);
    assert.equal(state.props.kubeConfig.connection.auth.kind, 'sandbox-cluster', 'the props keep the connection as written');
    assertNoSecret('the state', allState());
    assertNoSecret('the outputs', JSON.stringify(outcome.value));
    assertNoSecret('the log', text);
  });

  test('a fresh token on the next deploy changes nothing: one pod list, no exec, same clusterId', { timeout }, async () => {
    adapter.mode = 'rotate';
    const before = stateOf('conn', 'adapter-schema').attr.clusterId;
    const m = await measured(() => deployStack(connectionStack('conn', 'minimal'), STAGE));
    assert.equal(m.podLists, 1);
    assert.equal(m.execs.length, 0);
    assert.equal(stateOf('conn', 'adapter-schema').attr.clusterId, before);
    adapter.mode = 'token-of-user';
  });

  test('an adapter failure, or a token the server refuses, fails the deploy with E_KUBERNETES_API and no token', { timeout }, async () => {
    adapter.mode = 'fail';
    const recorded = stateOf('conn', 'adapter-schema').attr.fingerprint;
    const changed = [S0, T1, 'CREATE TABLE IF NOT EXISTS orders.via_adapter_2 (id UInt64) ENGINE = MergeTree ORDER BY id'];
    let err = await rejection(deployStack(connectionStack('conn', 'minimal', { statements: changed }), STAGE));
    assert.equal(err.code, 'E_KUBERNETES_API');
    assert.match(err.message, /the Alchemy Kubernetes connection could not be resolved/);
    assert.match(err.message, /the cluster sandbox is being deleted/);
    adapter.mode = 'wrong';
    err = await rejection(deployStack(connectionStack('conn', 'minimal', { statements: changed }), STAGE));
    assert.equal(err.code, 'E_KUBERNETES_API');
    assert.match(err.message, /401|Unauthorized/i);
    assertNoSecret('the error', err.message);
    assert.equal(stateOf('conn', 'adapter-schema').attr.fingerprint, recorded, 'the outputs are the last good apply');
    adapter.mode = 'token-of-user';
  });

  test('no adapter registered for the auth kind: the error names the kind and the layer to add', { timeout }, async () => {
    const providers = Layer.mergeAll(clickHouseSchemaProvider, clusterProvider());
    const err = await rejection(deployStack(connectionStack('conn-no-adapter', 'minimal', { providers }), STAGE));
    assert.equal(err.code, 'E_KUBERNETES_API');
    assert.match(err.message, /no Kubernetes cluster adapter is registered for auth kind 'sandbox-cluster'/);
    assert.match(err.message, /Kubernetes\.providers\(\)/);
  });

  test("Kubernetes.KubeConfig({ path, context }) goes through Alchemy's kubeconfig adapter; destroy too", { timeout }, async () => {
    const providers = Layer.mergeAll(clickHouseSchemaProvider, clusterProvider(), Kubernetes.providers());
    const kubeConfig = Kubernetes.KubeConfig({ path: sandbox.kubeconfig, context: 'sandbox-minimal' });
    const T2 = 'CREATE TABLE IF NOT EXISTS orders.via_kubeconfig (id UInt64) ENGINE = MergeTree ORDER BY id';
    const stack = connectionStack('conn-kubeconfig', 'minimal', { providers, kubeConfig, statements: [S0, T2] });
    await deployStack(stack, STAGE);
    for (const pod of sandbox.info.pods) assert.ok(sandbox.tablesOn(pod, 'orders').includes('via_kubeconfig'), pod);
    const state = stateOf('conn-kubeconfig', 'adapter-schema');
    assert.deepEqual(state.props.kubeConfig, { auth: { kind: 'kubeconfig', path: sandbox.kubeconfig, context: 'sandbox-minimal' } });
    assertNoSecret('the state', allState());
    await destroyStack(stack, STAGE);
    assert.equal(stateOf('conn-kubeconfig', 'adapter-schema'), undefined);
  });

  test("a 'token' connection is refused at declaration: the token would be stored with the props", { timeout }, async () => {
    const kubeConfig = { endpoint: sandbox.info.server, auth: { kind: 'token', token: sandbox.info.tokens.admin } };
    const err = await rejection(deployStack(connectionStack('conn-token', 'minimal', { kubeConfig }), STAGE));
    assert.equal(err.code, 'E_INVALID_CONFIG');
    assert.equal(err.issues[0].path, 'kubeConfig.auth.kind');
    assert.match(err.message, /stores verbatim in its state/);
    assertNoSecret('the error', err.message);
    assertNoSecret('the state', allState());
  });
});
