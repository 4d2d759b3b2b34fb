// The live-schema check against real ClickHouse 18.16 servers (a sandbox of one
// shard of three replicas, with ZooKeeper): what apply verifies after the
// statements ran, what verify() reports, and what a comparison may never touch.
import { after, before, describe, modern, test, test1816 } from './lib/engine.mjs';

import assert from 'node:assert/strict';

import { addonTarget, apply, verify } from '../dist/index.js';
import { assertsTheAddonBuild } from './binding.mjs';
import { rejection } from './lib/rejection.mjs';
import { sandboxProps } from './lib/sandbox-props.mjs';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';
import { statementLog } from './lib/batch.mjs';

/** A column name as the pods' server prints it in a definition: 26.x quotes it, 18.16 does not. */
const q = (name) => (modern ? `\`${name}\`` : name);

// See tests/lib/sandbox-dir.mjs.
const dir = sandboxDir('live-schema');
const timeout = 120_000;
let sandbox;
let pods;

before(() => {
  sandbox = startSandbox(dir, 3);
  pods = sandbox.info.pods;
});

after(() => stopSandbox(dir));

assertsTheAddonBuild(addonTarget);

const query = (pod, sql) => sandbox.query(pod, sql);

const props = (statements, extra = {}) => sandboxProps(sandbox, statements, extra);

/** Pod name -> object name -> status, for compact assertions. */
const statuses = (result) =>
  Object.fromEntries(result.pods.map((p) => [p.pod, Object.fromEntries(p.objects.map((o) => [o.name, o.status]))]));

const scratchDatabases = (pod) =>
  query(pod, "SELECT name FROM system.databases WHERE name LIKE '_clickhouse_schema_verify_%'");

const BASE = [
  'CREATE DATABASE IF NOT EXISTS live',
  'CREATE TABLE IF NOT EXISTS live.events (id UInt64, at DateTime, v Float64 DEFAULT 1.0, note String DEFAULT \'n/a\') ENGINE = MergeTree PARTITION BY toYYYYMM(at) ORDER BY (id, at)',
  'CREATE VIEW IF NOT EXISTS live.recent AS SELECT id, at FROM live.events WHERE at > toDateTime(0)',
  'CREATE TABLE IF NOT EXISTS live.daily (day Date, n UInt64) ENGINE = SummingMergeTree ORDER BY day',
  'CREATE MATERIALIZED VIEW IF NOT EXISTS live.daily_mv TO live.daily AS SELECT toDate(at) AS day, count() AS n FROM live.events GROUP BY day',
];

describe('the live schema on real servers', () => {
  let state;

  test('an apply verifies every declared object on every pod, and an unchanged deploy costs no exec', { timeout }, async () => {
    await sandbox.clearLogs();
    const result = await apply('live-schema', props(BASE));
    assert.deepEqual(result.appliedTo, pods);
    state = result.state;
    const execs = await sandbox.control('GET', '/sandbox/exec-log');
    // One exec per pod (execMode 'perPod'): its statements, then the live-schema check.
    assert.equal(execs.length, pods.length);
    const checks = statementLog(execs).filter((e) => e.stdin.startsWith('CREATE DATABASE _clickhouse_schema_verify_'));
    assert.deepEqual(checks.map((e) => e.pod).sort(), pods);
    assert.ok(checks.every((e) => e.batch !== undefined), 'each check ran in its pod\'s statements\' exec');
    for (const pod of pods) assert.equal(scratchDatabases(pod), '', `no scratch database left on ${pod}`);

    await sandbox.clearLogs();
    const again = await apply('live-schema', props(BASE), state);
    assert.equal(again.changed, false);
    assert.deepEqual(await sandbox.control('GET', '/sandbox/exec-log'), [], 'no exec, no verification');
  });

  test('verify reports every object as ok, and runs one exec per pod and no statement', { timeout }, async () => {
    await sandbox.clearLogs();
    const result = await verify('live-schema', props(BASE), state);
    assert.equal(result.drifted, false);
    const ok = Object.fromEntries(['live', 'live.events', 'live.recent', 'live.daily', 'live.daily_mv'].map((n) => [n, 'ok']));
    assert.deepEqual(statuses(result), Object.fromEntries(pods.map((p) => [p, ok])));
    const compared = Object.fromEntries(result.pods[0].objects.map((o) => [o.name, o.compared]));
    assert.deepEqual(compared, {
      live: 'existence',
      'live.events': 'server',
      'live.recent': 'server',
      'live.daily': 'server',
      'live.daily_mv': 'text',
    });
    const execs = await sandbox.control('GET', '/sandbox/exec-log');
    assert.equal(execs.length, pods.length);
  });

  test('twenty harmless rewrites of the statements are not differences', { timeout }, async () => {
    const events = BASE[1];
    const rewrites = [
      events.replace('CREATE TABLE IF NOT EXISTS', 'create table if not exists'),
      events.replace('(id UInt64, at DateTime', '(\n  id UInt64,\n  at DateTime'),
      events.replace('ENGINE = MergeTree', 'ENGINE = MergeTree()'),
      events.replace('ENGINE = MergeTree', 'ENGINE MergeTree'),
      events.replace('DEFAULT 1.0', 'DEFAULT 1.'),
      events.replace('DEFAULT 1.0', 'DEFAULT 1.00'),
      events.replace('id UInt64', '`id` UInt64'),
      events.replace('id UInt64', '"id" UInt64'),
      events.replace('ENGINE = MergeTree', 'ENGINE=MergeTree'),
      events.replace('live.events', '`live`.`events`'),
      events.replace('ORDER BY (id, at)', '/* the key */ ORDER BY (id,at) -- sorted\n'),
      events.replace('ORDER BY (id, at)', 'order by ( id , at )'),
      events.replace("DEFAULT 'n/a'", "DEFAULT 'n\\/a'"),
      events + ' SETTINGS index_granularity = 8192',
      events + ';',
      events.replace('PARTITION BY', '\n\tPARTITION   BY'),
    ];
    const views = [
      BASE[2].replace('SELECT id, at FROM live.events', 'select id, at from `live`.`events`'),
      BASE[2].replace('WHERE at > toDateTime(0)', 'WHERE (at > toDateTime(0))'),
      BASE[4].replace('AS SELECT toDate(at) AS day', 'AS\nSELECT toDate(at) as day'),
      BASE[4].replace('count() AS n FROM live.events', 'count() AS n FROM live."events" -- every event\n'),
    ];
    assert.equal(rewrites.length + views.length, 20);
    for (const statement of rewrites) {
      const result = await verify('live-schema', props([BASE[0], statement, ...BASE.slice(2)]), state);
      assert.equal(result.drifted, false, `${statement}\n${JSON.stringify(result.pods[0].objects, null, 1)}`);
    }
    for (const statement of views) {
      const statements = BASE.map((s) => (s.startsWith(statement.slice(0, 40)) ? statement : s));
      const result = await verify('live-schema', props(statements), state);
      assert.equal(result.drifted, false, `${statement}\n${JSON.stringify(result.pods[0].objects, null, 1)}`);
    }
  });

  test('an ORDER BY changed under IF NOT EXISTS fails with the clause named, and nothing is recorded', { timeout }, async () => {
    const changed = BASE.map((s, i) => (i === 1 ? s.replace('ORDER BY (id, at)', 'ORDER BY at') : s));
    const err = await rejection(apply('live-schema', props(changed), state));
    assert.equal(err.code, 'E_SCHEMA_MISMATCH');
    assert.equal(err.object, 'live.events');
    assert.equal(err.statementIndex, 1);
    // Every pod fails the check. The pods run in parallel and the first failure stops the pass, so
    // which of them got to its check first depends on timing; the error names that one.
    assert.ok(pods.includes(err.pod), `${err.pod} is one of ${pods}`);
    assert.deepEqual(err.differences, [{ clause: 'ORDER BY', declared: 'at', live: '(id, at)' }]);
    assert.ok(
      err.message.includes(`live.events on ${err.pod}: ORDER BY is \`(id, at)\`, declared \`at\``),
      err.message,
    );
    assert.match(err.message, /statement 1 \(CREATE \.\.\. IF NOT EXISTS\) left the existing table as it was, and no ALTER can change ORDER BY of a table/);
    assert.match(err.message, /allow it in the props: rebuild: \{ 'live\.events': \{ cutoverColumn:/);
    assert.match(err.message, /Nothing is recorded/);
  });

  test("verify: 'warn' reports the mismatch as an event and records the apply", { timeout }, async () => {
    const changed = BASE.map((s, i) => (i === 1 ? s.replace("DEFAULT 'n/a'", "DEFAULT 'none'") : s));
    const events = [];
    const result = await apply('live-schema', props(changed, { verify: 'warn' }), state, { onEvent: (e) => events.push(e) });
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(result.changed, true);
    assert.deepEqual(result.appliedTo, pods);
    const mismatches = events.filter((e) => e.kind === 'schemaMismatch');
    assert.deepEqual(mismatches.map((e) => e.pod).sort(), pods);
    assert.deepEqual(mismatches[0].objects[0].differences, [
      // As each server prints a column: 26.x quotes its name.
      { clause: 'column note', declared: `${q('note')} String DEFAULT 'none'`, live: `${q('note')} String DEFAULT 'n/a'` },
    ]);
    assert.doesNotMatch(JSON.stringify(events), /CREATE TABLE/, 'events carry no statement text');
  });

  test('a changed view query is a difference', { timeout }, async () => {
    const changed = BASE.map((s, i) => (i === 2 ? s.replace('toDateTime(0)', 'toDateTime(1)') : s));
    const result = await verify('live-schema', props(changed), state);
    assert.equal(result.drifted, true);
    const recent = result.pods[0].objects.find((o) => o.name === 'live.recent');
    assert.equal(recent.status, 'differs');
    assert.deepEqual(recent.differences.map((d) => d.clause), ['AS']);
    assert.match(recent.differences[0].declared, /toDateTime\(1\)/);
  });

  test('a table dropped by hand on one of three pods is missing there only', { timeout }, async () => {
    query(pods[1], 'DROP TABLE live.daily_mv');
    const result = await verify('live-schema', props(BASE), state);
    assert.equal(result.drifted, true);
    const found = statuses(result);
    assert.equal(found[pods[1]]['live.daily_mv'], 'missing');
    assert.equal(found[pods[0]]['live.daily_mv'], 'ok');
    assert.equal(found[pods[2]]['live.daily_mv'], 'ok');

    // What Alchemy's drift repair does with it (src/provider.ts `read`): the
    // state without that pod, so apply re-runs the list on exactly that pod.
    const observed = { ...state, pods: state.pods.filter((p) => p.name !== pods[1]), podNames: state.podNames.filter((n) => n !== pods[1]) };
    await sandbox.clearLogs();
    const repaired = await apply('live-schema', props(BASE), observed);
    assert.deepEqual(repaired.appliedTo, [pods[1]]);
    const execs = await sandbox.control('GET', '/sandbox/exec-log');
    assert.deepEqual([...new Set(execs.map((e) => e.pod))], [pods[1]]);
    assert.equal((await verify('live-schema', props(BASE), repaired.state)).drifted, false);
    state = repaired.state;
  });

  test('a wiped pod (same uid) is detected', { timeout }, async () => {
    const uid = state.pods.find((p) => p.name === pods[2]).uid;
    await sandbox.control('POST', `/sandbox/pods/${pods[2]}/wipe`);
    const result = await verify('live-schema', props(BASE), state);
    const found = statuses(result);
    assert.deepEqual(Object.values(found[pods[2]]), ['missing', 'missing', 'missing', 'missing', 'missing']);
    const pod = await sandbox.control('GET', `/api/v1/namespaces/sandbox/pods/${pods[2]}`);
    assert.equal(pod.metadata.uid, uid, 'the wipe kept the pod object');
    const repaired = await apply('live-schema', props(BASE), { ...state, pods: state.pods.filter((p) => p.name !== pods[2]) });
    assert.deepEqual(repaired.appliedTo, [pods[2]]);
    state = repaired.state;
  });
});

describe('what a comparison may touch', () => {
  const replicated = [
    'CREATE DATABASE IF NOT EXISTS rep',
    "CREATE TABLE IF NOT EXISTS rep.events (id UInt64, v String) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/rep/events', '{replica}') ORDER BY id",
  ];
  const zkChildren = (pod, path) =>
    query(pod, `SELECT name FROM system.zookeeper WHERE path = '${path}' ORDER BY name`).split('\n').filter(Boolean);

  test1816('replication of inserts', 'a replicated table is compared without a scratch ZooKeeper path, and the replicas are untouched', { timeout }, async () => {
    const { state } = await apply('rep-schema', props(replicated));
    query(pods[0], "INSERT INTO rep.events VALUES (1, 'a'), (2, 'b')");
    query(pods[0], 'SYSTEM SYNC REPLICA rep.events');
    const before = {
      root: zkChildren(pods[0], '/clickhouse'),
      tables: zkChildren(pods[0], '/clickhouse/tables/0'),
      replicas: zkChildren(pods[0], '/clickhouse/tables/0/rep/events/replicas'),
      log: zkChildren(pods[0], '/clickhouse/tables/0/rep/events/log'),
    };
    const result = await verify('rep-schema', props(replicated), state);
    assert.equal(result.drifted, false, JSON.stringify(result.pods[0].objects));
    assert.deepEqual(
      {
        root: zkChildren(pods[0], '/clickhouse'),
        tables: zkChildren(pods[0], '/clickhouse/tables/0'),
        replicas: zkChildren(pods[0], '/clickhouse/tables/0/rep/events/replicas'),
        log: zkChildren(pods[0], '/clickhouse/tables/0/rep/events/log'),
      },
      before,
    );
    for (const pod of pods) {
      query(pod, 'SYSTEM SYNC REPLICA rep.events');
      assert.equal(query(pod, 'SELECT count() FROM rep.events'), '2', pod);
      assert.equal(scratchDatabases(pod), '', pod);
    }
    // A different replication path is a difference of the engine, compared as text.
    const moved = [replicated[0], replicated[1].replace('/rep/events', '/rep/events2')];
    const differs = await verify('rep-schema', props(moved), state);
    const object = differs.pods[0].objects[1];
    assert.equal(object.status, 'differs');
    assert.deepEqual(object.differences.map((d) => d.clause), ['ENGINE']);
  });

  test('objects that cannot be created in scratch are verified as far as the server allows', { timeout }, async () => {
    const statements = [
      'CREATE DATABASE IF NOT EXISTS lim',
      // 18.16 creates a Distributed table over a missing local table: compared by the server.
      'CREATE TABLE IF NOT EXISTS lim.dist (id UInt64) ENGINE = Distributed(sandbox, lim, nowhere, rand())',
      // An engine that connects elsewhere is never created in scratch: its columns are, with
      // ENGINE = Null, and the engine is compared as text with its literals hidden.
      "CREATE TABLE IF NOT EXISTS lim.remote_csv (id UInt64) ENGINE = URL('http://127.0.0.1:9/secret-path.csv', CSV)",
    ];
    const { state } = await apply('lim-schema', props(statements));
    const result = await verify('lim-schema', props(statements), state);
    const objects = Object.fromEntries(result.pods[0].objects.map((o) => [o.name, [o.status, o.compared]]));
    assert.deepEqual(objects, { lim: ['ok', 'existence'], 'lim.dist': ['ok', 'server'], 'lim.remote_csv': ['ok', 'text'] });
    const changed = [...statements.slice(0, 2), statements[2].replace('secret-path', 'other-path')];
    const differs = await verify('lim-schema', props(changed), state);
    const remote = differs.pods[0].objects[2];
    assert.deepEqual(remote.differences, [
      // 26.x prints the format as a literal ('CSV'), and literals are hidden.
      { clause: 'ENGINE', declared: "URL('<hidden>', CSV)", live: modern ? "URL('<hidden>', '<hidden>')" : "URL('<hidden>', CSV)" },
    ]);
    assert.doesNotMatch(JSON.stringify(differs), /secret-path|other-path/);
  });
});
