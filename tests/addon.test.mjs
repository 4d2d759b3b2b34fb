// Loads the built package (dist/ over the native addon) the way a user does and
// exercises every export, including the properties of the errors it throws.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

import {
  validateConfig,
  configWarnings,
  fingerprint,
  redactClickHouseOutput,
  isClickHouseSchemaError,
  addonTarget,
} from '../dist/index.js';
import { assertsTheAddonBuild } from './binding.mjs';

assertsTheAddonBuild(addonTarget);

const quickstart = () => ({
  target: {
    namespace: 'example-observability',
    podSelector: { 'clickhouse.altinity.com/chi': 'orders' },
  },
  statements: [
    'CREATE DATABASE IF NOT EXISTS orders',
    'CREATE TABLE IF NOT EXISTS orders.events (id UUID, at DateTime, payload String) ENGINE = MergeTree ORDER BY at',
  ],
});

/** Runs `fn`, asserts it throws a ClickHouseSchemaError, and returns the error. */
function thrown(fn) {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof Error, 'the addon throws real Error objects');
    assert.ok(isClickHouseSchemaError(err), `expected a ClickHouseSchemaError, got ${err}`);
    return err;
  }
  assert.fail('expected the call to throw');
}

test('validateConfig resolves the quick start with every documented default', () => {
  const resolved = validateConfig('orders-schema', quickstart());
  assert.equal(resolved.target.namespace, 'example-observability');
  assert.deepEqual(resolved.target.podSelector, { 'clickhouse.altinity.com/chi': 'orders' });
  assert.equal(resolved.target.container, 'clickhouse');
  assert.deepEqual(resolved.client, {
    user: 'default',
    database: 'default',
    passwordEnv: 'CLICKHOUSE_PASSWORD',
    port: 9000,
  });
  assert.equal(resolved.execution.mode, 'fanout');
  assert.equal(resolved.onDelete, 'retain');
  assert.deepEqual(resolved.deleteStatements, []);
  assert.equal(resolved.waitForPod.timeoutMs, 120000);
  assert.equal(resolved.maxReconcilePasses, 3);
  assert.equal(resolved.statementTimeoutMs, 300000);
  assert.deepEqual(resolved.retry, { maxAttempts: 3, backoffMs: 1000 });
  assert.equal(resolved.statements.length, 2);
});

test('a password in client is refused with a reason, and the error carries its properties', () => {
  const props = quickstart();
  props.client = { password: 'hunter2-very-secret' };
  const err = thrown(() => validateConfig('orders-schema', props));
  assert.equal(err.name, 'ClickHouseSchemaError');
  assert.equal(err.code, 'E_INVALID_CONFIG');
  assert.equal(err.resourceId, 'orders-schema');
  assert.match(err.message, /^Invalid ClickHouseSchema configuration for 'orders-schema':/);
  assert.ok(Array.isArray(err.issues));
  const issue = err.issues.find((i) => i.path === 'client.password');
  assert.ok(issue, `an issue names client.password: ${JSON.stringify(err.issues)}`);
  assert.match(issue.reason, /passwordEnv/);
  assert.ok(!err.message.includes('hunter2-very-secret'), 'the rejected value is not echoed');
  assert.equal(err.statementIndex, undefined);
  assert.ok(!('pod' in err), 'fields that do not apply are absent');
});

test('every problem is listed at once, each with its path', () => {
  const err = thrown(() =>
    validateConfig('billing-schema', {
      target: { namespace: 'ns', podSelector: {} },
      client: { port: 70000 },
      statements: ['CREATE DATABASE IF NOT EXISTS b', '   '],
      onDelete: 'run',
      surprise: true,
    }),
  );
  const paths = err.issues.map((i) => i.path);
  for (const expected of ['target.podSelector', 'client.port', 'statements[1]', 'deleteStatements', 'surprise']) {
    assert.ok(paths.includes(expected), `issues name ${expected}: ${JSON.stringify(paths)}`);
    assert.ok(err.message.includes(expected), `message names ${expected}`);
  }
});

test('onCluster statements without the clause are rejected by index', () => {
  const props = quickstart();
  props.execution = { mode: 'onCluster', cluster: 'sandbox' };
  props.statements = [
    "CREATE DATABASE IF NOT EXISTS orders ON CLUSTER 'sandbox'",
    "CREATE TABLE orders.t (s String DEFAULT 'ON CLUSTER sandbox') ENGINE = MergeTree ORDER BY s",
  ];
  const err = thrown(() => validateConfig('orders-schema', props));
  assert.deepEqual(
    err.issues.map((i) => i.path),
    ['statements[1]'],
  );
  assert.match(err.message, /statements 1/);
  assert.match(err.message, /fanout/);
});

test('validateConfig and fingerprint name NaN and function props instead of failing the conversion', () => {
  for (const f of [validateConfig, (id, p) => fingerprint(p, id)]) {
    const props = quickstart();
    props.waitForPod = { timeoutMs: Number.NaN };
    props.readyBarrier = () => true;
    const err = thrown(() => f('orders-schema', props));
    assert.equal(err.code, 'E_INVALID_CONFIG');
    assert.deepEqual(err.issues.map((i) => i.path), ['waitForPod.timeoutMs', 'readyBarrier']);
  }
});

test('configWarnings names each statement that would put a credential into state', () => {
  const props = quickstart();
  props.statements.push(
    "CREATE USER IF NOT EXISTS app IDENTIFIED WITH plaintext_password BY 'hunter2-secret'",
    "CREATE TABLE IF NOT EXISTS orders.raw (x String) ENGINE = S3('https://b.example/x.csv', 'AKIAEXAMPLE', 'sEcReT', 'CSV')",
  );
  const warnings = configWarnings('orders-schema', props);
  assert.deepEqual(
    warnings.map((w) => w.path),
    [`statements[${props.statements.length - 2}]`, `statements[${props.statements.length - 1}]`],
  );
  for (const w of warnings) {
    assert.match(w.reason, /stores props verbatim in its state/);
    assert.match(w.reason, /IDENTIFIED WITH sha256_hash BY/);
    assert.match(w.reason, /named collections/);
    assert.ok(!w.reason.includes('hunter2') && !w.reason.includes('sEcReT'), 'the warning repeats no secret');
  }
  assert.deepEqual(configWarnings('orders-schema', quickstart()), []);
});

test("README's table of error codes is the one generated from Rust into index.d.ts", () => {
  const root = new URL('..', import.meta.url);
  const dts = readFileSync(new URL('index.d.ts', root), 'utf8');
  const generated = dts.match(/export declare const enum ClickHouseSchemaErrorCode \{([^}]*)\}/)?.[1];
  assert.ok(generated, 'index.d.ts declares ClickHouseSchemaErrorCode');
  const fromRust = [...generated.matchAll(/^\s*(E_[A-Z_]+) = '(E_[A-Z_]+)'/gm)].map((m) => {
    assert.equal(m[1], m[2]);
    return m[1];
  });
  const readme = readFileSync(new URL('README.md', root), 'utf8');
  const documented = [...readme.matchAll(/^\| `(E_[A-Z_]+)` \|/gm)].map((m) => m[1]);
  assert.ok(fromRust.length >= 12, fromRust.join());
  assert.deepEqual(documented, fromRust);
});

test('non-object props never crash the addon', () => {
  for (const props of [null, 'x', 42, [], undefined]) {
    const err = thrown(() => validateConfig('x', props));
    assert.equal(err.code, 'E_INVALID_CONFIG');
  }
});

test('fingerprint covers what is applied and ignores how it is driven', () => {
  const base = fingerprint(quickstart());
  assert.match(base, /^[0-9a-f]{64}$/);
  assert.equal(fingerprint(quickstart()), base, 'deterministic');

  const driven = quickstart();
  driven.waitForPod = { timeoutMs: 5000 };
  driven.retry = { maxAttempts: 7 };
  driven.maxReconcilePasses = 9;
  driven.statementTimeoutMs = 1000;
  driven.target.namespace = 'elsewhere';
  assert.equal(fingerprint(driven), base);

  const changed = quickstart();
  changed.statements.push('CREATE TABLE IF NOT EXISTS orders.more (x UInt8) ENGINE = Memory');
  assert.notEqual(fingerprint(changed), base);

  const explicitDefaults = quickstart();
  explicitDefaults.client = { user: 'default', port: 9000 };
  assert.equal(fingerprint(explicitDefaults), base, 'defaults and the same explicit values agree');

  const err = thrown(() => fingerprint({ statements: [] }, 'orders-schema'));
  assert.equal(err.resourceId, 'orders-schema');
});

test('redactClickHouseOutput keeps the code and removes the statement literals', () => {
  const statement =
    "CREATE TABLE t (x String) ENGINE = S3('https://bucket.example/x', 'AKIAEXAMPLEKEY1', 'wJalr''XUtn/FEMI') FORMAT";
  // clickhouse-client 18.16 echoes a syntax error from the failure point onward, literals verbatim.
  const output =
    "Code: 62. DB::Exception: Syntax error: failed at position 70: 'AKIAEXAMPLEKEY1', 'wJalr''XUtn/FEMI') FORMAT. Expected one of: ...\n";
  const r = redactClickHouseOutput(output, statement);
  assert.equal(r.clickHouseCode, 62);
  assert.equal(r.clickHouseException, 'DB::Exception');
  for (const secret of ['AKIAEXAMPLEKEY1', "wJalr''XUtn/FEMI", "wJalr'XUtn/FEMI", 'XUtn/FEMI']) {
    assert.ok(!r.text.includes(secret), `${secret} must not survive: ${r.text}`);
  }
  assert.match(r.text, /Code: 62/);
});

test('redactClickHouseOutput caps its result', () => {
  const r = redactClickHouseOutput('Code: 60. DB::Exception: ' + 'x'.repeat(100_000), 'SELECT 1');
  assert.ok(Buffer.byteLength(r.text) <= 2048 + 64, `capped, got ${Buffer.byteLength(r.text)} bytes`);
  assert.equal(r.clickHouseCode, 60);
});
