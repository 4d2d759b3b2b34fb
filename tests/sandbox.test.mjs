// apply/destroy through the built package over its real transport (kube-rs,
// WebSocket exec) against the sandbox: a test Kubernetes API server whose
// pods are real ClickHouse 18.16 servers. What a user would check is checked
// the way a user would: by querying each pod with kubectl exec.
import { after, before, describe, test, test1816 } from './lib/engine.mjs';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';

import { addonTarget, apply, destroy } from '../dist/index.js';
import { assertsTheAddonBuild } from './binding.mjs';
import { rejection } from './lib/rejection.mjs';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';
import { batchStatements } from './lib/batch.mjs';

// See tests/lib/sandbox-dir.mjs.
const dir = sandboxDir('test');
// A hang must fail the test rather than stall the suite.
const timeout = 120_000;
let sandbox;
let info;
let kubeconfig;

before(() => {
  sandbox = startSandbox(dir, 3);
  ({ info, kubeconfig } = sandbox);
});

after(() => stopSandbox(dir));

assertsTheAddonBuild(addonTarget);

const control = (...args) => sandbox.control(...args);
const query = (...args) => sandbox.query(...args);
const tablesOn = (...args) => sandbox.tablesOn(...args);
const clearLogs = () => sandbox.clearLogs();

const selector = { 'clickhouse.altinity.com/chi': 'sandbox' };

function props(statements, extra = {}) {
  return {
    target: { namespace: 'sandbox', podSelector: selector },
    statements,
    kubeConfig: { kubeconfigPath: kubeconfig },
    retry: { maxAttempts: 3, backoffMs: 100 },
    // These scenarios count every exec; the live-schema check has its own
    // file (tests/live-schema.test.mjs).
    verify: 'off',
    ...extra,
  };
}

async function execLog() {
  return control('GET', '/sandbox/exec-log');
}

// The fanout scenarios share one sandbox and build on each other, in order.
describe('fanout against real ClickHouse', () => {
  const statements = [
    'CREATE DATABASE IF NOT EXISTS shop',
    'CREATE TABLE IF NOT EXISTS shop.orders (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id',
    'CREATE TABLE IF NOT EXISTS shop.orders_daily (day Date, n UInt64) ENGINE = SummingMergeTree ORDER BY day',
    'CREATE MATERIALIZED VIEW IF NOT EXISTS shop.orders_mv TO shop.orders_daily AS SELECT toDate(at) AS day, count() AS n FROM shop.orders GROUP BY day',
  ];
  let state;
  let createLog;
  // What a converge costs in execs is counted with the live-schema check on (the default): it runs
  // in the exec of each pod's statements.
  const checked = (list, extra = {}) => props(list, { verify: 'fail', ...extra });
  const isCheck = (stdin) => stdin.startsWith('CREATE DATABASE _clickhouse_schema_verify_');

  test('create applies every statement to every pod', { timeout }, async () => {
    await clearLogs();
    const result = await apply('shop-schema', checked(statements));
    createLog = await execLog();
    assert.equal(result.changed, true);
    assert.deepEqual(result.appliedTo, info.pods);
    state = result.state;
    for (const pod of info.pods) {
      assert.deepEqual(tablesOn(pod, 'shop'), ['orders', 'orders_daily', 'orders_mv'], pod);
    }
    assert.deepEqual(state.podNames, info.pods);
    assert.equal(state.pods.length, 3);
    assert.ok(state.pods.every((p) => /^[0-9a-f-]{36}$/.test(p.uid)), 'pod uids recorded');
    // The documented encoding of the sandbox cluster's endpoint (crates/core/src/kubernetes/cluster_id.rs),
    // which both builds must record, so switching builds never re-applies.
    const text = readFileSync(kubeconfig, 'utf8');
    const server = /server: (\S+)/.exec(text)[1];
    const ca = /certificate-authority-data: (\S+)/.exec(text)[1];
    assert.equal(state.clusterId, createHash('sha256').update(`sandbox|${server}|${ca}||false`).digest('hex'));
  });

  test('no exec argv ever contains a statement; every statement arrived on stdin', { timeout }, async () => {
    assert.equal(createLog.length, 3, 'one exec per pod (execMode perPod), the check in it');
    for (const record of createLog) {
      assert.deepEqual(batchStatements(record.stdin)?.statements, statements, `stdin carries the list: ${record.stdin}`);
      assert.ok(isCheck(batchStatements(record.stdin).check), `and the check after it: ${record.stdin}`);
      for (const arg of record.argv) {
        for (const s of statements) assert.ok(!arg.includes(s), `statement in argv: ${arg}`);
      }
      assert.equal(record.exit_code, 0);
    }
  });

  test('an unchanged converge costs one pod list and no exec', { timeout }, async () => {
    await clearLogs();
    const result = await apply('shop-schema', checked(statements), state);
    assert.equal(result.changed, false);
    assert.deepEqual(result.state, state);
    const api = await control('GET', '/sandbox/api-log');
    assert.deepEqual(
      api.map((r) => `${r.method} ${r.path}`),
      ['GET /api/v1/namespaces/sandbox/pods'],
    );
    assert.equal((await execLog()).length, 0);
  });

  test('scale-out applies the whole list to the new pod only', { timeout }, async () => {
    const added = await control('POST', '/sandbox/pods', {});
    assert.deepEqual(tablesOn(added.name, 'shop'), [], 'a new replica starts empty');
    await clearLogs();
    const result = await apply('shop-schema', checked(statements), state);
    // Read before the query below, which the sandbox runs as an exec of its own.
    const log = await execLog();
    assert.deepEqual(result.appliedTo, [added.name]);
    assert.deepEqual(tablesOn(added.name, 'shop'), ['orders', 'orders_daily', 'orders_mv']);
    assert.deepEqual(log.map((r) => r.pod), [added.name], 'one exec, on the new pod only');
    assert.ok(isCheck(batchStatements(log[0].stdin).check), 'its check in it');
    assert.equal(result.state.podNames.length, 4);
    state = result.state;
  });

  test('a replaced pod (same name, new uid, empty disk) gets the schema again', { timeout }, async () => {
    const victim = info.pods[1];
    const before = state.pods.find((p) => p.name === victim).uid;
    await control('POST', `/sandbox/pods/${victim}/replace`);
    assert.deepEqual(tablesOn(victim, 'shop'), [], 'the replacement has an empty disk');
    await clearLogs();
    const result = await apply('shop-schema', checked(statements), state);
    assert.deepEqual(result.appliedTo, [victim]);
    const log = await execLog();
    assert.deepEqual(log.map((r) => r.pod), [victim], 'one exec carries the list and its check, on the replaced pod only');
    assert.ok(isCheck(batchStatements(log[0].stdin).check));
    const after = result.state.pods.find((p) => p.name === victim).uid;
    assert.notEqual(after, before);
    assert.deepEqual(tablesOn(victim, 'shop'), ['orders', 'orders_daily', 'orders_mv']);
    state = result.state;
  });

  test('an SQL error on statement 2 names the pod and the code, and nothing is recorded', { timeout }, async () => {
    await control('DELETE', `/sandbox/pods/${state.podNames[3]}`);
    const broken = [...statements.slice(0, 2), 'CREATE TABLE shop.orders (id UInt64) ENGINE = Memory'];
    // One pod at a time: in parallel, the pod being deleted can fail its first statement
    // (connection refused), a lower index than statement 2, and that would be the one reported.
    const err = await rejection(apply('shop-schema', props(broken, { parallelism: 1 }), state));
    assert.equal(err.code, 'E_STATEMENT_FAILED');
    assert.equal(err.statementIndex, 2);
    assert.equal(err.pod, info.pods[0]);
    assert.equal(err.clickHouseCode, 57, 'TABLE_ALREADY_EXISTS');
    assert.equal(err.exitCode, 57);
    assert.match(err.message, /statement 2 failed on pod chi-sandbox-sandbox-0-0-0\nwith ClickHouse code 57/);
  });

  test('a secret in a failing literal never appears in the error', { timeout }, async () => {
    const secrets = ['AKIAIOSFODNN7EXAMPLE', "wJalrXUtn''FEMI/K7MDENG", 'pa$$-w0rd-Xyzzy'];
    const leaky = [
      "CREATE TABLE shop.s3src (x String) ENGINE = URL('http://127.0.0.1:1/x', 'AKIAIOSFODNN7EXAMPLE', 'wJalrXUtn''FEMI/K7MDENG') FORMAT",
      "CREATE USER shop_writer IDENTIFIED BY 'pa$$-w0rd-Xyzzy'",
    ];
    // Alone (an exec of its own) and after another statement (in the pod's script).
    for (const [list, index] of leaky.flatMap((s) => [[[s], 0], [[statements[0], s], 1]])) {
      const err = await rejection(apply('shop-schema', props(list), state));
      assert.equal(err.code, 'E_STATEMENT_FAILED');
      assert.equal(err.statementIndex, index);
      assert.ok(err.clickHouseCode > 0, 'the code survives redaction');
      const everything = `${err.message}\n${err.stack}\n${JSON.stringify(err)}`;
      for (const secret of secrets) {
        for (const spelling of [secret, secret.replace("''", "'"), secret.replace("''", "\\'")]) {
          assert.ok(!everything.includes(spelling), `${spelling} leaked:\n${everything}`);
        }
      }
    }
  });

  test('a WebSocket dropped mid-exec is retried and the apply succeeds', { timeout }, async () => {
    await control('POST', '/sandbox/faults', { kind: 'drop_exec', count: 1, after: 'after_start' });
    await clearLogs();
    const extra = [...statements, 'CREATE TABLE IF NOT EXISTS shop.notes (id UInt64) ENGINE = Memory'];
    const result = await apply('shop-schema', props(extra), state);
    assert.equal(result.changed, true);
    const log = await execLog();
    assert.equal(log.filter((r) => r.outcome === 'fault_drop').length, 1, 'one exec was dropped');
    for (const pod of info.pods) assert.ok(tablesOn(pod, 'shop').includes('notes'), pod);
    state = result.state;
  });

  test('destroy with retain leaves everything; with run it executes deleteStatements', { timeout }, async () => {
    await clearLogs();
    await destroy('shop-schema', props(statements), state);
    assert.equal((await control('GET', '/sandbox/api-log')).length, 0, 'retain never reaches the cluster');

    const runProps = props(statements, {
      onDelete: 'run',
      deleteStatements: ['DROP TABLE IF EXISTS shop.orders_mv', 'DROP DATABASE IF EXISTS shop'],
    });
    await clearLogs();
    await destroy('shop-schema', runProps, state);
    // One exec per pod for the delete statements (a destroy checks nothing).
    const log = await execLog();
    assert.deepEqual(log.map((r) => r.pod).sort(), [...info.pods].sort());
    for (const record of log) assert.deepEqual(batchStatements(record.stdin)?.statements, runProps.deleteStatements);
    for (const pod of info.pods) {
      assert.equal(query(pod, "SELECT count() FROM system.databases WHERE name = 'shop'"), '0', pod);
    }
  });
});

describe('identity, credentials and RBAC', () => {
  test('client.user and client.passwordEnv select another user', { timeout }, async () => {
    const result = await apply(
      'writer-schema',
      props(['CREATE DATABASE IF NOT EXISTS by_writer'], {
        client: { user: 'writer', passwordEnv: 'CLICKHOUSE_WRITER_PASSWORD' },
      }),
    );
    assert.equal(result.changed, true);
    const log = await execLog();
    assert.match(log.at(-1).argv[2], /--user='writer'/);
    assert.match(log.at(-1).argv[2], /\$\{CLICKHOUSE_WRITER_PASSWORD:-\}/);
    assert.ok(!JSON.stringify(log).includes(info.passwords.writer), 'the password never left the pod');
  });

  test('the minimal RBAC token (list pods, create pods/exec) is enough', { timeout }, async () => {
    const result = await apply(
      'minimal-schema',
      props(['CREATE DATABASE IF NOT EXISTS by_minimal'], { kubeConfig: { kubeconfigPath: kubeconfig, context: 'sandbox-minimal' } }),
    );
    assert.equal(result.changed, true);
    for (const pod of info.pods) assert.equal(query(pod, "SELECT count() FROM system.databases WHERE name = 'by_minimal'"), '1');
  });

  test('a token without pods/exec fails with a clear error and nothing recorded', { timeout }, async () => {
    const err = await rejection(
      apply('no-exec-schema', props(['SELECT 1'], { kubeConfig: { kubeconfigPath: kubeconfig, context: 'sandbox-no-exec' } })),
    );
    assert.equal(err.code, 'E_KUBERNETES_API');
    assert.equal(err.pod, info.pods[0]);
    assert.match(err.message, /forbidden/);
    assert.match(err.message, /'create' on pods\/exec/);
  });
});

describe('onCluster through ZooKeeper', () => {
  test1816('ON CLUSTER', 'one exec per statement on one pod reaches every pod; an unchanged converge makes no call', { timeout }, async () => {
    await clearLogs();
    const onCluster = props(
      [
        'CREATE DATABASE IF NOT EXISTS dist ON CLUSTER sandbox',
        "CREATE TABLE IF NOT EXISTS dist.events ON CLUSTER 'sandbox' (id UInt64) ENGINE = MergeTree ORDER BY id",
      ],
      { execution: { mode: 'onCluster', cluster: 'sandbox' }, settings: { distributed_ddl_task_timeout: 60 } },
    );
    const result = await apply('dist-schema', onCluster);
    assert.equal(result.changed, true);
    const log = await execLog();
    // Once, not per pod; an exec per statement, so each status table is read before the next is sent.
    assert.equal(log.length, 2, 'once, not per pod');
    assert.ok(log.every((r) => batchStatements(r.stdin) === undefined));
    assert.ok(log.every((r) => r.pod === log[0].pod));
    assert.match(log[0].argv[2], /--distributed_ddl_task_timeout='60'/);
    for (const pod of info.pods) {
      assert.deepEqual(tablesOn(pod, 'dist'), ['events'], pod);
    }

    await clearLogs();
    const again = await apply('dist-schema', onCluster, result.state);
    assert.equal(again.changed, false);
    assert.equal((await control('GET', '/sandbox/api-log')).length, 0, 'no list, no exec');
  });
});

describe('proxies', () => {
  /** A minimal HTTP CONNECT proxy on loopback, counting the tunnels it opened. */
  async function connectProxy() {
    const tunnels = [];
    const server = createServer();
    server.on('connect', (req, client, head) => {
      tunnels.push(req.url);
      const [host, port] = req.url.split(':');
      const upstream = connect(Number(port), host, () => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        upstream.write(head);
        upstream.pipe(client);
        client.pipe(upstream);
      });
      upstream.on('error', () => client.destroy());
      client.on('error', () => upstream.destroy());
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { tunnels, url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
  }

  const database = async (name, kubeConfig) => {
    const result = await apply(`${name}-schema`, props([`CREATE DATABASE IF NOT EXISTS ${name}`], { kubeConfig }));
    assert.equal(result.changed, true);
    for (const pod of info.pods) assert.equal(query(pod, `SELECT count() FROM system.databases WHERE name = '${name}'`), '1');
  };

  test("a kubeconfig cluster's proxy-url carries the pod list and the exec WebSockets", { timeout }, async () => {
    const proxy = await connectProxy();
    try {
      const proxied = join(dir, 'kubeconfig-proxy');
      writeFileSync(
        proxied,
        readFileSync(kubeconfig, 'utf8').replace(/(- name: sandbox\n  cluster:\n)/, `$1    proxy-url: ${proxy.url}\n`),
      );
      await database('by_proxy_url', { kubeconfigPath: proxied });
      // Two pod lists and one exec per pod, each through the proxy (connections may be reused).
      assert.ok(proxy.tunnels.length >= 2, `tunnels: ${proxy.tunnels.join(', ')}`);
      assert.ok(proxy.tunnels.every((t) => t === `127.0.0.1:${info.port}`), proxy.tunnels.join(', '));
    } finally {
      proxy.close();
    }
  });

  test('HTTPS_PROXY carries the connection, unless NO_PROXY names the server', { timeout }, async () => {
    const proxy = await connectProxy();
    try {
      process.env.HTTPS_PROXY = proxy.url;
      await database('by_https_proxy', { kubeconfigPath: kubeconfig });
      const through = proxy.tunnels.length;
      assert.ok(through >= 2, `tunnels: ${proxy.tunnels.join(', ')}`);
      process.env.NO_PROXY = 'localhost,127.0.0.0/8';
      await database('by_no_proxy', { kubeconfigPath: kubeconfig });
      assert.equal(proxy.tunnels.length, through, 'NO_PROXY bypasses the proxy');
    } finally {
      delete process.env.HTTPS_PROXY;
      delete process.env.NO_PROXY;
      proxy.close();
    }
  });
});
