// Convergence (converge: 'additive') on real ClickHouse: the 18.16 servers of the sandbox (one
// shard of three replicas, with ZooKeeper) and, with SANDBOX_ENGINE=modern, the 26.9 engine. A
// declaration that differs from the live table in ways an ALTER can make is brought there after
// the statements ran, with rows kept; what no ALTER may make is refused by name.
import { after, before, describe, modern, test, test1816 } from './lib/engine.mjs';

import assert from 'node:assert/strict';

import { addonTarget, apply, plan, verify } from '../dist/index.js';
import { assertsTheAddonBuild } from './binding.mjs';
import { rejection } from './lib/rejection.mjs';
import { sandboxProps } from './lib/sandbox-props.mjs';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';

const dir = sandboxDir('converge');
const timeout = 180_000;
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
const converging = (statements, extra = {}) => props(statements, { converge: 'additive', ...extra });

/** Applies `statements` (no convergence) and inserts `rows` into `table` on every pod. */
async function start(id, statements, table, rows) {
  const result = await apply(id, props(statements));
  for (const pod of pods) query(pod, `INSERT INTO ${table} VALUES ${rows}`);
  return result.state;
}

/** Every event of an apply, and the apply's result. */
async function applyWithEvents(id, p, state) {
  const events = [];
  const result = await apply(id, p, state, { onEvent: (e) => events.push(e) });
  return { result, events: events.filter((e) => e.kind === 'converge') };
}

const columns = (pod, database, table) =>
  query(pod, `SELECT name, type, default_expression FROM system.columns WHERE database = '${database}' AND name != '' AND table = '${table}' FORMAT TSV`)
    .split('\n')
    .map((l) => l.split('\t'));

describe('convergence', () => {
  test('without the prop, an added column fails the check as before, and nothing is altered', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c0', 'CREATE TABLE IF NOT EXISTS c0.t (id UInt64) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c0', base, 'c0.t', '(1)');
    const changed = [base[0], base[1].replace('(id UInt64)', '(id UInt64, n UInt8)')];
    const err = await rejection(apply('c0', props(changed), state));
    assert.equal(err.code, 'E_SCHEMA_MISMATCH');
    assert.equal(err.object, 'c0.t');
    assert.deepEqual(err.differences.map((d) => d.clause), ['column n']);
    for (const pod of pods) assert.deepEqual(columns(pod, 'c0', 't').map((c) => c[0]), ['id']);
  });

  test('columns added at the end and in the middle keep every row, with the declared values', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c1', 'CREATE TABLE IF NOT EXISTS c1.t (id UInt64, v String) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c1', base, 'c1.t', "(1, 'a'), (2, 'b')");
    const declared = [
      base[0],
      "CREATE TABLE IF NOT EXISTS c1.t (id UInt64, m UInt8 DEFAULT 7, v String, e String DEFAULT concat(v, '!')) ENGINE = MergeTree ORDER BY id",
    ];
    const { result, events } = await applyWithEvents('c1', converging(declared), state);
    assert.deepEqual(result.appliedTo, pods);
    for (const pod of pods) {
      assert.deepEqual(columns(pod, 'c1', 't').map((c) => c[0]), ['id', 'm', 'v', 'e'], pod);
      assert.equal(query(pod, 'SELECT id, m, v, e FROM c1.t ORDER BY id FORMAT TSV'), '1\t7\ta\ta!\n2\t7\tb\tb!', pod);
    }
    const alters = events.filter((e) => e.action === 'alter');
    assert.deepEqual(alters.map((e) => e.pod).sort(), pods);
    assert.deepEqual(alters[0].changes, ['add column m after id', 'add column e after v']);
    assert.equal(alters[0].object, 'c1.t');

    // Converged: the next deploy with the same declaration runs nothing.
    const again = await apply('c1', converging(declared), result.state);
    assert.equal(again.changed, false);
  });

  test('a column default and comment are modified', { timeout }, async () => {
    const base = [
      'CREATE DATABASE IF NOT EXISTS c2',
      "CREATE TABLE IF NOT EXISTS c2.t (id UInt64, v String DEFAULT 'a' COMMENT 'old') ENGINE = MergeTree ORDER BY id",
    ];
    const state = await start('c2', base, 'c2.t (id)', '(1)');
    const declared = [base[0], base[1].replace("DEFAULT 'a' COMMENT 'old'", "DEFAULT 'b' COMMENT 'new'")];
    await apply('c2', converging(declared), state);
    for (const pod of pods) {
      assert.equal(query(pod, "SELECT default_expression, comment FROM system.columns WHERE database = 'c2' AND table = 't' AND name = 'v' FORMAT TabSeparatedRaw"), "'b'\tnew", pod);
      query(pod, 'INSERT INTO c2.t (id) VALUES (2)');
      assert.equal(query(pod, 'SELECT v FROM c2.t ORDER BY id FORMAT TSV'), 'a\nb', pod);
    }
  });

  test('a default is not changed while some part lacks its column (old rows would read the new one), and is once every part stores it', { timeout }, async () => {
    // Review C3: rows written before the column was added read its current default.
    const table = (column) => `CREATE TABLE IF NOT EXISTS c17.t (id UInt64${column}) ENGINE = MergeTree ORDER BY id`;
    const base = ['CREATE DATABASE IF NOT EXISTS c17', table('')];
    const state = await start('c17', base, 'c17.t', '(1)');
    const { result } = await applyWithEvents('c17', converging([base[0], table(', m UInt8 DEFAULT 7')]), state);
    const changed = [base[0], table(', m UInt8 DEFAULT 8')];
    const err = await rejection(apply('c17', converging(changed), result.state));
    assert.equal(err.code, 'E_STATEMENT_FAILED');
    assert.ok(err.message.includes('a check before its ALTER, found parts of the table that do not store the column whose default changes'), err.message);
    for (const pod of pods) {
      assert.equal(query(pod, 'SELECT m FROM c17.t WHERE id = 1'), '7', pod);
      assert.equal(query(pod, "SELECT default_expression FROM system.columns WHERE database = 'c17' AND table = 't' AND name = 'm'"), '7', pod);
      // What the message says to do: store the column in every part.
      query(pod, 'OPTIMIZE TABLE c17.t FINAL');
    }
    const done = await apply('c17', converging(changed), result.state);
    assert.deepEqual(done.appliedTo, pods);
    for (const pod of pods) {
      query(pod, 'INSERT INTO c17.t (id) VALUES (2)');
      assert.equal(query(pod, 'SELECT id, m FROM c17.t ORDER BY id FORMAT TSV'), '1\t7\n2\t8', pod);
    }
  });

  test('a column whose default varies at each call (now()) is added to an empty table only', { timeout }, async () => {
    const table = (name, column) => `CREATE TABLE IF NOT EXISTS c18.${name} (id UInt64${column}) ENGINE = MergeTree ORDER BY id`;
    const base = ['CREATE DATABASE IF NOT EXISTS c18', table('full', ''), table('empty', '')];
    const state = await start('c18', base, 'c18.full', '(1)');
    const declared = [base[0], table('full', ', at DateTime DEFAULT now()'), table('empty', ', at DateTime DEFAULT now()')];
    const err = await rejection(apply('c18', converging(declared), state));
    assert.equal(err.code, 'E_STATEMENT_FAILED');
    assert.ok(err.message.includes('convergence of c18.full failed on pod'), err.message);
    assert.ok(err.message.includes('found rows in the table, and the column it adds has a default that gives another value at each call'), err.message);
    for (const pod of pods) assert.deepEqual(columns(pod, 'c18', 'full').map((c) => c[0]), ['id'], pod);
    // Without the table that holds rows, the empty one gets the column.
    const { result } = await applyWithEvents('c18', converging([base[0], base[1], declared[2]]), state);
    assert.deepEqual(result.appliedTo, pods);
    for (const pod of pods) assert.deepEqual(columns(pod, 'c18', 'empty').map((c) => c[0]), ['id', 'at'], pod);
  });

  if (modern) {
    test('settings, comment, a codec, a skip index and a projection are modified; a TTL no longer declared is removed', { timeout }, async () => {
      const base = [
        'CREATE DATABASE IF NOT EXISTS c3',
        'CREATE TABLE IF NOT EXISTS c3.t (id UInt64, at DateTime, v String, INDEX old id TYPE minmax GRANULARITY 1) ENGINE = MergeTree ORDER BY id TTL at + INTERVAL 3650 DAY SETTINGS min_bytes_for_wide_part = 0',
      ];
      const state = await start('c3', base, 'c3.t', "(1, now(), 'a')");
      const declared = [
        base[0],
        "CREATE TABLE IF NOT EXISTS c3.t (id UInt64, at DateTime, v String CODEC(ZSTD(1)), INDEX iv v TYPE bloom_filter GRANULARITY 1, PROJECTION p (SELECT id, v ORDER BY v)) ENGINE = MergeTree ORDER BY id SETTINGS merge_with_ttl_timeout = 3600 COMMENT 'events'",
      ];
      const { events } = await applyWithEvents('c3', converging(declared), state);
      assert.ok(events.some((e) => e.action === 'alter'));
      for (const pod of pods) {
        const ddl = query(pod, "SELECT create_table_query FROM system.tables WHERE database = 'c3' AND name = 't' FORMAT TabSeparatedRaw");
        for (const part of ['CODEC(ZSTD(1))', 'INDEX iv v TYPE bloom_filter', 'PROJECTION p', 'merge_with_ttl_timeout = 3600', "COMMENT 'events'"]) {
          assert.ok(ddl.includes(part), `${pod}: ${part} in ${ddl}`);
        }
        assert.ok(!ddl.includes('INDEX old'), ddl);
        assert.ok(!ddl.includes('min_bytes_for_wide_part'), ddl);
        assert.ok(!ddl.includes('TTL'), ddl);
        assert.equal(query(pod, 'SELECT count() FROM c3.t'), '1');
      }

      // The same index and projection names with other definitions: dropped, added and
      // materialized in one ALTER, and every part has them (review S2).
      const replaced = [base[0], declared[1].replace('TYPE bloom_filter', 'TYPE minmax').replace('ORDER BY v)', 'ORDER BY (v, id))')];
      const { result } = await applyWithEvents('c3', converging(replaced), state);
      assert.deepEqual(result.appliedTo, pods);
      for (const pod of pods) {
        const ddl = query(pod, "SELECT create_table_query FROM system.tables WHERE database = 'c3' AND name = 't' FORMAT TabSeparatedRaw");
        assert.ok(ddl.includes('INDEX iv v TYPE minmax'), ddl);
        assert.equal(query(pod, "SELECT count() FROM system.mutations WHERE database = 'c3' AND NOT is_done"), '0', pod);
        assert.equal(
          query(pod, "SELECT countIf(secondary_indices_uncompressed_bytes > 0) = count() FROM system.parts WHERE database = 'c3' AND table = 't' AND active"),
          '1',
          pod,
        );
        assert.equal(query(pod, "SELECT count() > 0 FROM system.projection_parts WHERE database = 'c3' AND table = 't' AND name = 'p' AND active"), '1', pod);
      }
    });

    test('a new table or column TTL is refused with the ALTER it would take, and no row is deleted', { timeout }, async () => {
      const base = ['CREATE DATABASE IF NOT EXISTS c13', 'CREATE TABLE IF NOT EXISTS c13.t (id UInt64, at DateTime, v String) ENGINE = MergeTree ORDER BY id'];
      // One row 60 days old, which a 30-day TTL would delete, and one of today.
      const state = await start('c13', base, 'c13.t', "(1, now() - INTERVAL 60 DAY, 'old'), (2, now(), 'new')");
      const withTtl = [base[0], base[1].replace('ORDER BY id', 'ORDER BY id TTL at + INTERVAL 30 DAY')];
      let err = await rejection(apply('c13', converging(withTtl), state));
      assert.equal(err.code, 'E_SCHEMA_MISMATCH');
      assert.equal(err.object, 'c13.t');
      assert.ok(err.message.includes('rows (or a column'), err.message);
      assert.ok(err.message.includes('ALTER TABLE `c13`.`t` MODIFY TTL at + toIntervalDay(30)'), err.message);
      const columnTtl = [base[0], base[1].replace('v String', 'v String TTL at + INTERVAL 30 DAY')];
      err = await rejection(apply('c13', converging(columnTtl), state));
      assert.equal(err.code, 'E_SCHEMA_MISMATCH');
      assert.ok(err.message.includes('ALTER TABLE `c13`.`t` MODIFY COLUMN `v` String TTL at + toIntervalDay(30)'), err.message);
      for (const pod of pods) {
        query(pod, 'OPTIMIZE TABLE c13.t FINAL');
        assert.equal(query(pod, 'SELECT id, v FROM c13.t ORDER BY id FORMAT TSV'), '1\told\n2\tnew', pod);
        const ddl = query(pod, "SELECT create_table_query FROM system.tables WHERE database = 'c13' AND name = 't' FORMAT TabSeparatedRaw");
        assert.ok(!ddl.includes('TTL'), `${pod}: ${ddl}`);
      }
    });
  }

  test('a changed plain view is replaced', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c4', 'CREATE VIEW IF NOT EXISTS c4.v AS SELECT 1 AS a'];
    const { state } = await apply('c4', props(base));
    const declared = [base[0], 'CREATE VIEW IF NOT EXISTS c4.v AS SELECT 2 AS a, 3 AS b'];
    const { events } = await applyWithEvents('c4', converging(declared), state);
    assert.deepEqual(events.filter((e) => e.action === 'alter').map((e) => e.changes), pods.map(() => ['replace the view']));
    for (const pod of pods) assert.equal(query(pod, 'SELECT a, b FROM c4.v FORMAT TSV'), '2\t3', pod);
  });

  test1816('a server without CREATE OR REPLACE VIEW', 'a view is replaced beside the old one, which serves until the swap; an object not a view under a name the swap uses is left with its rows', { timeout }, async () => {
    // Review C5: DROP then CREATE left no view between them, or none at all when the CREATE failed.
    const base = ['CREATE DATABASE IF NOT EXISTS c20', 'CREATE VIEW IF NOT EXISTS c20.v AS SELECT 1 AS a'];
    const { state } = await apply('c20', props(base));
    const [taken] = pods;
    query(taken, 'CREATE TABLE c20.v__clickhouse_schema_new (x UInt8) ENGINE = MergeTree ORDER BY x');
    query(taken, 'INSERT INTO c20.v__clickhouse_schema_new VALUES (9)');
    const declared = [base[0], 'CREATE VIEW IF NOT EXISTS c20.v AS SELECT 2 AS a'];
    const err = await rejection(apply('c20', converging(declared, { parallelism: 1 }), state));
    assert.equal(err.code, 'E_STATEMENT_FAILED');
    assert.equal(err.pod, taken);
    assert.ok(err.message.includes('found an object that is not a view under a name the replacement of a view uses'), err.message);
    assert.equal(query(taken, 'SELECT a FROM c20.v'), '1');
    assert.equal(query(taken, 'SELECT x FROM c20.v__clickhouse_schema_new'), '9');
    query(taken, 'DROP TABLE c20.v__clickhouse_schema_new');
    const { result } = await applyWithEvents('c20', converging(declared), state);
    assert.deepEqual(result.appliedTo, pods);
    for (const pod of pods) {
      assert.equal(query(pod, 'SELECT a FROM c20.v'), '2', pod);
      assert.deepEqual(sandbox.tablesOn(pod, 'c20'), ['v'], pod);
    }
  });

  test('a live column the declaration lacks is reported and kept with its data', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c5', 'CREATE TABLE IF NOT EXISTS c5.t (id UInt64, extra String) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c5', base, 'c5.t', "(1, 'keep me')");
    const declared = [base[0], 'CREATE TABLE IF NOT EXISTS c5.t (id UInt64, n UInt8 DEFAULT 5) ENGINE = MergeTree ORDER BY id'];
    const { result, events } = await applyWithEvents('c5', converging(declared), state);
    assert.deepEqual(result.appliedTo, pods);
    const kept = events.filter((e) => e.action === 'keptColumn');
    assert.deepEqual(kept.map((e) => [e.pod, e.object, e.column]).sort(), pods.map((p) => [p, 'c5.t', 'extra']));
    assert.match(kept[0].message, /column extra is not declared; it is kept with its data/);
    for (const pod of pods) assert.equal(query(pod, 'SELECT id, n, extra FROM c5.t FORMAT TSV'), '1\t5\tkeep me', pod);
  });

  test('a type change is refused with the ALTER it would take, then allowed per column', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c6', 'CREATE TABLE IF NOT EXISTS c6.t (id UInt64, v UInt8) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c6', base, 'c6.t', '(1, 200)');
    const declared = [base[0], base[1].replace('v UInt8', 'v UInt16')];
    const err = await rejection(apply('c6', converging(declared), state));
    assert.equal(err.code, 'E_SCHEMA_MISMATCH');
    assert.equal(err.object, 'c6.t');
    assert.ok(err.message.includes('column v: its type changes from UInt8 to UInt16'), err.message);
    assert.ok(err.message.includes("name 'c6.t.v' in allowTypeChange"), err.message);
    assert.ok(err.message.includes('ALTER TABLE `c6`.`t` MODIFY COLUMN `v` UInt16'), err.message);
    for (const pod of pods) assert.equal(columns(pod, 'c6', 't')[1][1], 'UInt8', pod);

    const { result } = await applyWithEvents('c6', converging(declared, { allowTypeChange: ['c6.t.v'] }), state);
    assert.deepEqual(result.appliedTo, pods);
    for (const pod of pods) {
      assert.equal(columns(pod, 'c6', 't')[1][1], 'UInt16', pod);
      assert.equal(query(pod, 'SELECT v FROM c6.t'), '200', pod);
    }
  });

  test('a type change whose values do not all convert fails by name, and the table keeps its type and rows', { timeout }, async () => {
    // Review C4: on a modern server the ALTER would change the definition at once and leave a
    // mutation failing for ever, the table unreadable; 18.16 refuses inside the ALTER.
    const base = ['CREATE DATABASE IF NOT EXISTS c15', 'CREATE TABLE IF NOT EXISTS c15.t (id UInt64, v String) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c15', base, 'c15.t', "(1, '1'), (2, 'abc')");
    const declared = [base[0], base[1].replace('v String', 'v UInt32')];
    const err = await rejection(apply('c15', converging(declared, { allowTypeChange: ['c15.t.v'] }), state));
    assert.equal(err.code, 'E_STATEMENT_FAILED');
    assert.equal(err.statementIndex, 1);
    assert.ok(pods.includes(err.pod), err.pod);
    assert.ok(err.message.includes('convergence of c15.t failed on pod'), err.message);
    if (modern) {
      assert.ok(err.message.includes('do not convert to the declared type exactly'), err.message);
    } else {
      assert.ok(err.message.includes('the server refused its statement 0 (1 in all for it), which did not run'), err.message);
    }
    for (const pod of pods) {
      assert.equal(columns(pod, 'c15', 't')[1][1], 'String', pod);
      assert.equal(query(pod, 'SELECT id, v FROM c15.t ORDER BY id FORMAT TSV'), '1\t1\n2\tabc', pod);
      assert.equal(query(pod, "SELECT count() FROM system.mutations WHERE database = 'c15' AND NOT is_done"), '0', pod);
    }
  });

  test('a declared column in the place of a live one of its type is refused as a possible rename, and its data stays', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c16', 'CREATE TABLE IF NOT EXISTS c16.t (id UInt64, amount UInt64) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c16', base, 'c16.t', '(1, 70)');
    const declared = [base[0], base[1].replace('amount UInt64', 'total UInt64')];
    const err = await rejection(apply('c16', converging(declared), state));
    assert.equal(err.code, 'E_SCHEMA_MISMATCH');
    assert.ok(err.message.includes('column total: the table holds amount, of the same type, where total is declared'), err.message);
    if (modern) assert.ok(err.message.includes('RENAME COLUMN `amount` TO `total`'), err.message);
    for (const pod of pods) assert.equal(query(pod, 'SELECT id, amount FROM c16.t FORMAT TSV'), '1\t70', pod);
  });

  test('an ORDER BY that appends a new column is modified with it', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c7', 'CREATE TABLE IF NOT EXISTS c7.t (id UInt64) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c7', base, 'c7.t', '(1), (2)');
    const declared = [base[0], 'CREATE TABLE IF NOT EXISTS c7.t (id UInt64, k UInt8) ENGINE = MergeTree ORDER BY (id, k)'];
    const { result } = await applyWithEvents('c7', converging(declared), state);
    assert.deepEqual(result.appliedTo, pods);
    for (const pod of pods) {
      assert.equal(query(pod, "SELECT sorting_key FROM system.tables WHERE database = 'c7' AND name = 't'"), 'id, k', pod);
      assert.equal(query(pod, 'SELECT count() FROM c7.t'), '2', pod);
    }
    // The primary key the ALTER left (the old sorting key) is not a reason to rebuild the table
    // when a rebuild entry for it is in the props and another statement changes (review C12).
    const events = [];
    const later = await apply(
      'c7',
      converging([...declared, 'CREATE DATABASE IF NOT EXISTS c7_other'], { rebuild: { 'c7.t': { cutoverColumn: 'id' } } }),
      result.state,
      { onEvent: (e) => events.push(e) },
    );
    assert.deepEqual(later.appliedTo, pods);
    assert.deepEqual(events.filter((e) => e.kind === 'rebuild').map((e) => e.message), []);
    for (const pod of pods) {
      // No rebuild's table, view or receipts beside it.
      assert.equal(query(pod, "SELECT groupArray(name) FROM system.tables WHERE database = 'c7'"), "['t']", pod);
      assert.equal(query(pod, 'SELECT count() FROM c7.t'), '2', pod);
    }
  });

  test('a change no ALTER makes is refused by name, and nothing is altered', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c8', 'CREATE TABLE IF NOT EXISTS c8.t (id UInt64) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c8', base, 'c8.t', '(1)');
    const declared = [base[0], 'CREATE TABLE IF NOT EXISTS c8.t (id UInt64, n UInt8) ENGINE = MergeTree PARTITION BY n ORDER BY id'];
    const err = await rejection(apply('c8', converging(declared), state));
    assert.equal(err.code, 'E_SCHEMA_MISMATCH');
    assert.ok(err.message.includes('Convergence left it: c8.t on'), err.message);
    assert.ok(err.message.includes('PARTITION BY: no ALTER changes it'), err.message);
    for (const pod of pods) assert.deepEqual(columns(pod, 'c8', 't').map((c) => c[0]), ['id'], pod);
  });

  test('the plan lists per pod what the apply then runs, and an unchanged resource costs no exec', { timeout }, async () => {
    const base = ['CREATE DATABASE IF NOT EXISTS c10', 'CREATE TABLE IF NOT EXISTS c10.t (id UInt64, extra String) ENGINE = MergeTree ORDER BY id'];
    const state = await start('c10', base, 'c10.t', "(1, 'x')");
    const declared = [base[0], 'CREATE TABLE IF NOT EXISTS c10.t (id UInt64, n UInt8, v UInt16) ENGINE = MergeTree ORDER BY id'];
    const planned = await plan('c10', converging(declared), state);
    assert.equal(planned.changed, true);
    assert.deepEqual(planned.converge.map((p) => p.pod), pods);
    for (const pod of planned.converge) {
      assert.deepEqual(
        pod.objects.map((o) => [o.object, o.statementIndex, o.changes, o.keptColumns]),
        [['c10.t', 1, ['add column n after id', 'add column v after n'], ['extra']]],
      );
      assert.deepEqual(pod.objects[0].statements, ['ALTER TABLE `c10`.`t` ' + (modern ? 'ADD COLUMN IF NOT EXISTS `n` UInt8 AFTER `id`, ADD COLUMN IF NOT EXISTS `v` UInt16 AFTER `n`' : 'ADD COLUMN n UInt8 AFTER `id`, ADD COLUMN v UInt16 AFTER `n`')]);
    }
    // The plan ran nothing.
    for (const pod of pods) assert.deepEqual(columns(pod, 'c10', 't').map((c) => c[0]), ['id', 'extra'], pod);

    const { result, events } = await applyWithEvents('c10', converging(declared), state);
    const ran = Object.fromEntries(events.filter((e) => e.action === 'alter').map((e) => [e.pod, e.changes]));
    assert.deepEqual(ran, Object.fromEntries(planned.converge.map((p) => [p.pod, p.objects[0].changes])));

    await sandbox.clearLogs();
    const unchanged = await plan('c10', converging(declared), result.state);
    assert.equal(unchanged.changed, false);
    assert.deepEqual(unchanged.converge, []);
    assert.deepEqual(await sandbox.control('GET', '/sandbox/exec-log'), [], 'no exec');
  });

  test('a column dropped by hand on one pod comes back through the repair path', { timeout }, async () => {
    const declared = ['CREATE DATABASE IF NOT EXISTS c11', 'CREATE TABLE IF NOT EXISTS c11.t (id UInt64, n UInt8 DEFAULT 3) ENGINE = MergeTree ORDER BY id'];
    const { state } = await apply('c11', converging(declared));
    const [victim] = pods;
    query(victim, 'INSERT INTO c11.t (id) VALUES (1)');
    query(victim, 'ALTER TABLE c11.t DROP COLUMN n');
    const found = await verify('c11', converging(declared), state);
    assert.equal(found.drifted, true);
    // What the provider's read does on drift: the pod is left out of the observed state, and the
    // repair's apply runs on it.
    const observed = { ...state, pods: state.pods.filter((p) => p.name !== victim), podNames: state.podNames.filter((n) => n !== victim) };
    // The plan checks the pod the apply runs on, not the covered ones (review C13).
    const planned = await plan('c11', converging(declared), observed);
    assert.deepEqual(planned.converge.map((p) => [p.pod, p.objects.map((o) => o.changes)]), [[victim, [['add column n after id']]]]);
    const { result, events } = await applyWithEvents('c11', converging(declared), observed);
    assert.deepEqual(result.appliedTo, [victim]);
    assert.deepEqual(events.filter((e) => e.action === 'alter').map((e) => [e.pod, e.changes]), [[victim, ['add column n after id']]]);
    assert.equal(query(victim, 'SELECT id, n FROM c11.t FORMAT TSV'), '1\t3');
    assert.equal((await verify('c11', converging(declared), result.state)).drifted, false);
  });

  test1816('replication of ALTERs', 'a replicated table is altered on one replica of its set, and every replica gets the column', { timeout }, async () => {
    const table = (columns) =>
      `CREATE TABLE IF NOT EXISTS c12.t (${columns}) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/c12/t', '{replica}') ORDER BY id`;
    const base = ['CREATE DATABASE IF NOT EXISTS c12', table('id UInt64')];
    const { state } = await apply('c12', props(base));
    query(pods[0], 'INSERT INTO c12.t VALUES (1)');
    const declared = [base[0], table('id UInt64, n UInt8 DEFAULT 4')];
    // The plan runs the ALTER on one replica of the set and says the others replicate it (review C13).
    const planned = await plan('c12', converging(declared), state);
    const [runner, ...replicas] = planned.converge;
    assert.deepEqual(runner.objects.map((o) => [o.object, o.statements.length > 0, o.replicatedFrom ?? null]), [['c12.t', true, null]]);
    assert.deepEqual(replicas.map((p) => p.objects.map((o) => [o.object, o.statements, o.replicatedFrom, o.changes])), replicas.map(() => [['c12.t', [], runner.pod, runner.objects[0].changes]]));
    await sandbox.clearLogs();
    const { result, events } = await applyWithEvents('c12', converging(declared), state);
    assert.deepEqual(result.appliedTo, pods);
    const execs = await sandbox.control('GET', '/sandbox/exec-log');
    const alters = execs.filter((e) => e.stdin.includes('clickhouse_schema_converge'));
    assert.equal(alters.length, 1, 'one ALTER exec for the replica set');
    assert.deepEqual(events.filter((e) => e.action === 'alter').map((e) => e.pod), [alters[0].pod]);
    // The other replicas either found the column already replicated, or waited for it.
    for (const e of events.filter((e) => e.action === 'replicated')) assert.notEqual(e.pod, alters[0].pod);
    for (const pod of pods) {
      assert.deepEqual(columns(pod, 'c12', 't').map((c) => c[0]), ['id', 'n'], pod);
    }
  });

  test1816('replication of ALTERs', 'replicas waiting for a claimant whose exec failed stop with the pass, and the next apply converges every replica', { timeout }, async () => {
    // Review C16: waiting replicas polled until statementTimeoutMs (here 10 minutes, past the
    // test's timeout) after the pod running the ALTERs had failed.
    const table = (columns) =>
      `CREATE TABLE IF NOT EXISTS c19.t (${columns}) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/c19/t', '{replica}') ORDER BY id`;
    const base = ['CREATE DATABASE IF NOT EXISTS c19', table('id UInt64')];
    const { state } = await apply('c19', props(base));
    const declared = [base[0], table('id UInt64, n UInt8 DEFAULT 4')];
    const slow = { statementTimeoutMs: 600_000 };
    await sandbox.clearLogs();
    // The first convergence exec answers nothing for 4 s, then its connection closes: the
    // replica running the ALTERs fails, while the others wait for them.
    await sandbox.control('POST', '/sandbox/faults', { kind: 'stall_exec', argv_contains: '-cv', count: 1, seconds: 4 });
    const events = [];
    const err = await rejection(apply('c19', converging(declared, slow), state, { onEvent: (e) => events.push(e) }));
    const log = await sandbox.control('GET', '/sandbox/exec-log');
    const stalled = log.find((e) => e.outcome === 'fault_stall');
    assert.ok(stalled, 'the convergence exec was stalled');
    assert.equal(err.pod, stalled.pod, err.message);
    assert.match(err.message, /convergence/);
    assert.ok(events.some((e) => e.kind === 'converge' && e.action === 'replicated'), 'another replica waited');
    const { result } = await applyWithEvents('c19', converging(declared, slow), state);
    assert.deepEqual(result.appliedTo, pods);
    for (const pod of pods) assert.deepEqual(columns(pod, 'c19', 't').map((c) => c[0]), ['id', 'n'], pod);
  });

  test1816('ON CLUSTER through ZooKeeper', 'under onCluster the other hosts are checked before the ALTERs and after them, until they have taken them', { timeout }, async () => {
    // Review C9: the plan came from one host, its ALTERs went to every host, and only that host
    // was checked after. (The sandbox's cluster is one replicated shard, where ON CLUSTER alters
    // only replicated tables; hosts that differ are refused, see converge/tests.rs.)
    const clustered = (statements) =>
      converging(statements, { execution: { mode: 'onCluster', cluster: 'sandbox' }, settings: { distributed_ddl_task_timeout: 60 } });
    const table = (columns) =>
      `CREATE TABLE IF NOT EXISTS c21.t ON CLUSTER sandbox (${columns}) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/c21/t', '{replica}') ORDER BY id`;
    const base = ['CREATE DATABASE IF NOT EXISTS c21 ON CLUSTER sandbox', table('id UInt64')];
    const { state } = await apply('c21', clustered(base));
    const declared = [base[0], table('id UInt64, n UInt8')];
    // A host the deploy does not compare (here one that is not Ready) would get the ALTERs all the
    // same: the check before them finds it in the cluster, and nothing is altered (review V4).
    await sandbox.control('PUT', `/sandbox/pods/${pods[2]}/state`, { state: 'not_ready' });
    let refused;
    try {
      refused = await rejection(apply('c21', clustered(declared), state));
    } finally {
      await sandbox.control('PUT', `/sandbox/pods/${pods[2]}/state`, { state: 'running' });
    }
    assert.equal(refused.code, 'E_STATEMENT_FAILED');
    assert.ok(refused.message.includes('found more hosts in the cluster than the pods compared'), refused.message);
    for (const pod of pods) assert.deepEqual(columns(pod, 'c21', 't').map((c) => c[0]), ['id'], pod);

    const planned = await plan('c21', clustered(declared), state);
    assert.deepEqual(planned.converge.map((p) => [p.pod, p.objects.map((o) => [o.object, o.changes, o.refused])]), [[pods[0], [['c21.t', ['add column n after id'], []]]]], JSON.stringify(planned.converge));
    await sandbox.clearLogs();
    const { result } = await applyWithEvents('c21', clustered(declared), state);
    assert.equal(result.changed, true);
    const execs = await sandbox.control('GET', '/sandbox/exec-log');
    const alters = execs.filter((e) => e.stdin.includes('clickhouse_schema_converge') && e.stdin.includes('ALTER TABLE'));
    assert.deepEqual(alters.map((e) => e.pod), [planned.converge[0].pod], 'one exec of ALTERs, where the plan said');
    // Each other host was checked before the ALTER and after it.
    const isCheck = (e) => e.stdin.startsWith('CREATE DATABASE _clickhouse_schema_verify_');
    for (const pod of pods.filter((p) => p !== alters[0].pod)) {
      const checks = execs.filter((e) => e.pod === pod && isCheck(e));
      assert.ok(checks.some((e) => e.id < alters[0].id) && checks.some((e) => e.id > alters[0].id), pod);
    }
    for (const pod of pods) assert.deepEqual(columns(pod, 'c21', 't').map((c) => c[0]), ['id', 'n'], pod);

    // A default change: its check (every part stores the column) runs on each host before the
    // ALTER reaches them all (review V1).
    query(pods[0], 'INSERT INTO c21.t VALUES (1, 2)');
    await sandbox.clearLogs();
    const changed = [base[0], table('id UInt64, n UInt8 DEFAULT 5')];
    const { result: again } = await applyWithEvents('c21', clustered(changed), result.state);
    assert.equal(again.changed, true);
    const log = await sandbox.control('GET', '/sandbox/exec-log');
    const alter = log.find((e) => e.stdin.includes('clickhouse_schema_converge') && e.stdin.includes('ALTER TABLE'));
    for (const pod of pods.filter((p) => p !== alter.pod)) {
      const guards = log.filter((e) => e.pod === pod && e.stdin.includes('parts_without_the_column') && !e.stdin.includes('ALTER TABLE'));
      assert.equal(guards.length, 1, pod);
      assert.ok(guards[0].id < alter.id, pod);
    }
    for (const pod of pods) {
      assert.equal(query(pod, "SELECT default_expression FROM system.columns WHERE database = 'c21' AND table = 't' AND name = 'n'"), '5', pod);
      assert.equal(query(pod, 'SELECT n FROM c21.t'), '2', pod);
    }
  });

  test('converge needs the check', { timeout }, async () => {
    const err = await rejection(apply('c9', converging(['SELECT 1'], { verify: 'off' })));
    assert.equal(err.code, 'E_INVALID_CONFIG');
    assert.deepEqual(err.issues.map((i) => i.path), ['converge']);
  });
});
