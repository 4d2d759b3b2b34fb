// The Alchemy provider end to end: Alchemy's own deploy and destroy (the
// library API, as from a Node 20 script) of a stack holding a ClickHouseSchema
// ordered after an upstream resource through readyBarrier, against the
// sandbox's real ClickHouse servers. What reached the cluster is read from the
// sandbox's API and exec logs; what the schema did, by querying each pod.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// Alchemy's local state lives under process.cwd() as it is when alchemy is
// first imported, so this file moves to a temp dir before importing it.
const stateRoot = mkdtempSync(join(tmpdir(), 'alchemy-ch-test-'));
process.chdir(stateRoot);
const Alchemy = await import('alchemy');
const Output = await import('alchemy/Output');
const Effect = await import('effect/Effect');
const Layer = await import('effect/Layer');
const { deployStack, destroyStack, driftStack } = await import('../dist/examples/runtime.js');
const { addonTarget, clickHouseSchema, clickHouseSchemaExecutor, clickHouseSchemaProvider, isClickHouseSchemaError } =
  await import('../dist/index.js');
const { assertsTheAddonBuild } = await import('./binding.mjs');

assertsTheAddonBuild(addonTarget);

// A fixed directory, so scripts/test.sh can stop this sandbox even when the
// test process is killed before its after() hook runs.
const dir = join(root, '.sandbox-alchemy');
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
    const { result, execs } = await measured(() => deployStack(stack(NAME, ID, { statements: [S0, S1] }), STAGE));
    assert.deepEqual(result.podNames, [...pods].sort());
    assert.equal(execs.length, 2 * pods.length);
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
      [newPod, newPod],
    );
    assert.deepEqual(sandbox.tablesOn(newPod, 'orders'), ['events']);
    assert.deepEqual(result.podNames, [...pods, newPod].sort());
    pods = [...pods, newPod];
  });

  test('a statement added: every pod runs the whole list', { timeout }, async () => {
    const { execs } = await measured(() => deployStack(stack(NAME, ID, { statements: [S0, S1, S2] }), STAGE));
    assert.equal(execs.length, 3 * pods.length);
    for (const pod of pods) {
      assert.equal(execs.filter((e) => e.pod === pod).length, 3, pod);
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
    assert.equal(stateOf(NAME, ID).attr.fingerprint, before.attr.fingerprint);
  });

  test('recovery: the fixed statement deploys, on every pod', { timeout }, async () => {
    const before = stateOf(NAME, ID);
    const { execs } = await measured(() => deployStack(stack(NAME, ID, { statements: [S0, S1, S2, FIXED] }), STAGE));
    assert.equal(execs.length, 4 * pods.length);
    for (const pod of pods) assert.deepEqual(sandbox.tablesOn(pod, 'orders'), ['customers', 'events', 'fixed']);
    const after = stateOf(NAME, ID);
    assert.equal(after.status, 'updated');
    assert.notEqual(after.attr.fingerprint, before.attr.fingerprint);
    assert.equal(after.attr.statementCount, 4);
  });

  test("destroy with onDelete 'retain': no cluster call, the data stays, the state is gone", { timeout }, async () => {
    const { api, execs } = await measured(() => destroyStack(stack(NAME, ID, { statements: [S0, S1, S2, FIXED] }), STAGE));
    assert.equal(api.length, 0, JSON.stringify(api));
    assert.equal(execs.length, 0);
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
    const { execs } = await measured(() => destroyStack(stack('e2e-run', 'scratch-schema', props), STAGE));
    assert.equal(execs.length, 2 * pods.length);
    for (const pod of pods) {
      assert.deepEqual(
        execs.filter((e) => e.pod === pod).map((e) => e.stdin.trim()),
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
    assert.equal(actionOf(await driftStack(NAME, STAGE, providers())), 'drifted');

    const { result, execs } = await measured(() => driftStack(NAME, STAGE, providers(), true));
    assert.equal(actionOf(result), 'repaired');
    // The repair's read looks at every pod (one check each); the statements ran on the victim only.
    const isCheck = (e) => e.stdin.startsWith('CREATE DATABASE _clickhouse_schema_verify_');
    assert.deepEqual([...new Set(execs.filter((e) => !isCheck(e)).map((e) => e.pod))], [victim], 'only the pod that lacked the table');
    assert.equal(execs.filter((e) => !isCheck(e)).length, statements.length);
    assert.deepEqual(sandbox.tablesOn(victim, 'drifted'), ['customers', 'events']);
    assert.deepEqual(stateOf(NAME, ID).attr.podNames, recordedPods, 'the repaired state covers every pod again');
    assert.equal(actionOf(await driftStack(NAME, STAGE, providers())), 'unchanged');
  });
});

describe('clickHouseSchema through Alchemy with an injected executor (no cluster)', () => {
  /** A fake cluster: `pods` may change between deploys; `failNextList` makes the next listPods reject. */
  function fakeCluster(names) {
    const cluster = { pods: names.map((name) => ({ name, uid: `${name}-uid` })), lists: 0, execs: [], failNextList: false };
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
    const logged = [];
    const capture = (write) => (chunk, ...rest) => {
      logged.push(String(chunk));
      return write(chunk, ...rest);
    };
    const [out, err] = [process.stdout.write, process.stderr.write];
    process.stdout.write = capture(out.bind(process.stdout));
    process.stderr.write = capture(err.bind(process.stderr));
    try {
      await deployStack(fakeStack('fake-credential', cluster, { statements }), STAGE);
    } finally {
      process.stdout.write = out;
      process.stderr.write = err;
    }
    const warning = logged.filter((line) => line.includes('holds a credential literal'));
    assert.equal(warning.length, 1, `one warning, got:\n${logged.join('')}`);
    assert.match(warning[0], /fake-schema/);
    assert.match(warning[0], /statements\[1\]/);
    assert.match(warning[0], /named collections/);
    assert.ok(!logged.join('').includes('sEcReT-value'), 'no log line repeats the secret');
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
