// Rebuilds of tables that are being written to. A writer inserts rows into the live table on every
// pod for the whole apply, the way an application does (each insert acknowledged or failed), and
// keeps a log of what the servers acknowledged. Some rows are dated now, some days ahead
// (scheduled events, producers with a skewed clock), some weeks back (late arrivals), and some
// repeat an earlier row exactly. What is asserted is what a user checks afterwards: the rebuilt
// table on each pod holds exactly the rows it held before plus every row the writer had
// acknowledged there, each as often as it was written, and no insert failed.
import { after, describe, modern, test, test1816 } from './lib/engine.mjs';
import assert from 'node:assert/strict';

import { addonTarget, apply } from '../dist/index.js';
import { assertsTheAddonBuild } from './binding.mjs';
import { sandboxProps as props } from './lib/sandbox-props.mjs';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';
import { withWriter, rowsOf, sameRows, noInsertFailed, DAY } from './lib/writer.mjs';

const dir = sandboxDir('rebuild-traffic');
// The 26.9 engine starts a process per query, so its rebuilds take about four times as long.
const timeout = modern ? 600_000 : 240_000;

after(() => stopSandbox(dir));

assertsTheAddonBuild(addonTarget);

const DB = 'CREATE DATABASE IF NOT EXISTS rt';
const COLUMNS = '(id UInt64, kind String, at DateTime, v Int64)';
const table = (name, engine, order) =>
  `CREATE TABLE IF NOT EXISTS rt.${name} ${COLUMNS} ENGINE = ${engine} PARTITION BY toYYYYMMDD(at) ORDER BY ${order}`;
const allow = (name, extra = {}) => ({
  rebuild: { [`rt.${name}`]: { cutoverColumn: 'at', cutoverDelaySeconds: 2, keepOld: false, ...extra } },
});

/** Six weeks of rows up to today, a partition a day that has rows, on `pod`. */
const history = (sandbox, pod, name, from) =>
  sandbox.query(
    pod,
    `INSERT INTO rt.${name} SELECT ${from} + number, 'old', toDateTime(toUnixTimestamp(now()) - 42 * 86400 + number * 7919), number ` +
      `FROM system.numbers LIMIT ${Math.floor((42 * 86400) / 7919)}`,
  );

const sortingKey = (sandbox, pod, name) =>
  sandbox.query(pod, `SELECT sorting_key FROM system.tables WHERE database = 'rt' AND name = '${name}'`);

describe('local tables on two pods', () => {
  let sandbox;
  let pods;
  test('starts', () => {
    sandbox = startSandbox(dir, 2);
    pods = sandbox.info.pods;
  });

  test('rows dated days after the cut-over that the table already holds are copied once (and no apply fails on them)', { timeout }, async () => {
    const first = await apply('rt-ahead', props(sandbox, [DB, table('ahead', 'MergeTree', 'id')]));
    for (const [i, pod] of pods.entries()) {
      history(sandbox, pod, 'ahead', i * 100_000);
      // Twelve scheduled rows, two to five days ahead of the servers' clock.
      sandbox.query(
        pod,
        `INSERT INTO rt.ahead SELECT 900000 + number, 'scheduled', toDateTime(toUnixTimestamp(now()) + (2 + number % 4) * 86400 + number), number FROM system.numbers LIMIT 12`,
      );
    }
    const before = pods.map((pod) => rowsOf(sandbox, pod, 'rt.ahead'));
    await apply('rt-ahead', props(sandbox, [DB, table('ahead', 'MergeTree', '(kind, id)')], allow('ahead')), first.state);
    for (const [i, pod] of pods.entries()) {
      assert.equal(sortingKey(sandbox, pod, 'ahead'), 'kind, id', `rebuilt on ${pod}`);
      sameRows(rowsOf(sandbox, pod, 'rt.ahead'), before[i], `every row once on ${pod}`);
    }
  });

  test('a writer inserting throughout the apply (rows dated now, days ahead, weeks back, and repeated): every acknowledged row is in the rebuilt table exactly once', { timeout }, async () => {
    const first = await apply('rt-steady', props(sandbox, [DB, table('steady', 'MergeTree', 'id')]));
    for (const [i, pod] of pods.entries()) history(sandbox, pod, 'steady', i * 100_000);
    const before = pods.map((pod) => rowsOf(sandbox, pod, 'rt.steady'));
    const events = [];
    const { written, failed } = await withWriter(sandbox, pods, 'rt.steady', { seed: 26 }, async (writer) => {
      await writer.until((w) => w.acknowledged() >= 6);
      await apply('rt-steady', props(sandbox, [DB, table('steady', 'MergeTree', '(kind, id)')], allow('steady')), first.state, {
        onEvent: (e) => events.push(e),
      });
      // A little more traffic after the swap, into the new table.
      const atSwap = writer.acknowledged();
      await writer.until((w) => w.acknowledged() >= atSwap + 4);
    });
    noInsertFailed(failed);
    for (const [i, pod] of pods.entries()) {
      assert.equal(sortingKey(sandbox, pod, 'steady'), 'kind, id', `rebuilt on ${pod}`);
      assert.ok(written.get(pod).length >= 12, `the writer wrote to ${pod}`);
      sameRows(rowsOf(sandbox, pod, 'rt.steady'), [...before[i], ...written.get(pod)], `every row once on ${pod}`);
    }
    const swapped = events.filter((e) => e.kind === 'rebuild' && e.step === 'swap' && /: swapped;/.test(e.message));
    assert.deepEqual(swapped.map((e) => e.pod).sort(), [...pods].sort());
  });

  test('rows that reach the old table late (one dated weeks back, after verification; one dated after the cut-over, after the view was dropped) are in the rebuilt table once, also with keepOld: false', { timeout }, async () => {
    const first = await apply('rt-late', props(sandbox, [DB, table('late', 'MergeTree', 'id')]));
    for (const [i, pod] of pods.entries()) history(sandbox, pod, 'late', i * 100_000);
    const before = pods.map((pod) => rowsOf(sandbox, pod, 'rt.late'));
    const now = Math.floor(Date.now() / 1000);
    const lateRow = `777777\tlate\t${now - 20 * DAY}\t7`;
    let strayRow = null;
    const insert = (pod, name, row) => {
      const [id, kind, at, v] = row.split('\t');
      sandbox.query(pod, `INSERT INTO rt.${name} VALUES (${id}, '${kind}', toDateTime(${at}), ${v})`);
    };
    let landed = null;
    let strayed = false;
    const events = [];
    await apply('rt-late', props(sandbox, [DB, table('late', 'MergeTree', '(kind, id)')], allow('late')), first.state, {
      onEvent: (e) => {
        events.push(e);
        // Right after the first pod's table was verified: the row reaches its live table, and
        // whether the swap had happened by then is read back at once.
        if (e.kind === 'rebuild' && e.step === 'verify' && e.pod === pods[0] && landed === null) {
          insert(pods[0], 'late', lateRow);
          landed = sandbox.tablesOn(pods[0], 'rt').includes('late__new') ? 'before the swap' : 'after the swap';
        }
        // Right after the second pod's swap: a row dated after the cut-over reaches its old table, as an insert
        // that began between the view's drop and the RENAME does (the rebuild compares the old
        // table after the cut-over delay).
        if (e.kind === 'rebuild' && e.step === 'swap' && e.pod === pods[1] && /: swapped;/.test(e.message) && !strayed) {
          // Dated after the cut-over (set before the backfill, a few seconds ago at most).
          strayRow = `888888\tstray\t${Math.floor(Date.now() / 1000) + 600}\t8`;
          insert(pods[1], 'late__old', strayRow);
          strayed = true;
        }
      },
    });
    assert.notEqual(landed, null, 'the late row was written during the apply');
    assert.ok(strayed, 'the stray row was written during the apply');
    sameRows(rowsOf(sandbox, pods[0], 'rt.late'), [...before[0], lateRow], `the late row once on ${pods[0]} (it landed ${landed})`);
    sameRows(rowsOf(sandbox, pods[1], 'rt.late'), [...before[1], strayRow], `the stray row once on ${pods[1]}`);
    for (const pod of pods) assert.deepEqual(sandbox.tablesOn(pod, 'rt').filter((t) => t.startsWith('late')), ['late'], `keepOld: false on ${pod}`);
    const copiedAfter = (pod) =>
      events.filter((e) => e.kind === 'rebuild' && e.step === 'swap' && e.pod === pod && /copied after the swap/.test(e.message) && e.rows > 0);
    if (landed === 'before the swap') {
      assert.equal(copiedAfter(pods[0]).length, 1, `the swap reports the row it copied from the old table on ${pods[0]}`);
    }
    assert.equal(copiedAfter(pods[1]).length, 1, `the swap reports the row it copied from the old table on ${pods[1]}`);
    assert.match(copiedAfter(pods[1])[0].message, /after its view was dropped/);
  });
});

describe('one shard of two replicas', () => {
  let sandbox;
  let pods;
  test1816('replication of inserts', 'starts', () => {
    stopSandbox(dir);
    sandbox = startSandbox(dir, 2);
    pods = sandbox.info.pods;
  });

  test1816('replication of inserts', 'a writer inserting on both replicas throughout a replicated rebuild: every acknowledged row is on every replica exactly once', { timeout }, async () => {
    // A path of this run's own: the sandbox directory (and its ZooKeeper data) outlives a run.
    const run = Date.now().toString(36);
    const engine = (v) => `ReplicatedMergeTree('/clickhouse/tables/{shard}/rt/shared_${run}${v}', '{replica}')`;
    const first = await apply('rt-shared', props(sandbox, [DB, table('shared', engine(''), 'id')]));
    history(sandbox, pods[0], 'shared', 0);
    sandbox.query(pods[1], 'SYSTEM SYNC REPLICA rt.shared');
    const before = rowsOf(sandbox, pods[1], 'rt.shared');
    // A row dated ahead that reaches one replica in the milliseconds between another's copy of
    // such rows and its own view is caught by the check before the backfill, which starts the
    // rebuild over: then the next apply goes on (a deploy retried), with the live table whole.
    const v2 = props(sandbox, [DB, table('shared', engine('_v2'), '(kind, id)')], allow('shared'));
    const { written, failed } = await withWriter(sandbox, pods, 'rt.shared', { seed: 3 }, async (writer) => {
      await writer.until((w) => w.acknowledged() >= 6);
      for (let attempt = 1; ; attempt++) {
        try {
          await apply('rt-shared', v2, first.state);
          return;
        } catch (err) {
          assert.equal(err.code, 'E_REBUILD_FAILED', err.message);
          assert.match(err.message, /step verify/);
          assert.ok(attempt < 3, `refused ${attempt} times: ${err.message}`);
          assert.equal(sortingKey(sandbox, pods[0], 'shared'), 'id', 'the live table is untouched');
          assert.deepEqual(sandbox.tablesOn(pods[0], 'rt').filter((t) => t.startsWith('shared')), ['shared'], 'nothing left over');
        }
      }
    });
    noInsertFailed(failed);
    const all = [...before, ...pods.flatMap((p) => written.get(p))];
    for (const pod of pods) {
      sandbox.query(pod, 'SYSTEM SYNC REPLICA rt.shared');
      assert.equal(sortingKey(sandbox, pod, 'shared'), 'kind, id', `rebuilt on ${pod}`);
      sameRows(rowsOf(sandbox, pod, 'rt.shared'), all, `every row once on ${pod}`);
    }
  });
});
