// Parallel fanout and progress events against real ClickHouse 18.16 servers
// (a sandbox of three pods): what onEvent reports while an apply runs, and a
// failure on every pod at once reported the same way every time.
import { after, before, test } from './lib/engine.mjs';
import assert from 'node:assert/strict';

import { addonTarget, apply } from '../dist/index.js';
import { assertsTheAddonBuild } from './binding.mjs';
import { rejection } from './lib/rejection.mjs';
import { sandboxProps } from './lib/sandbox-props.mjs';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';
import { batchStatements, statementLog } from './lib/batch.mjs';

// See tests/lib/sandbox-dir.mjs.
const dir = sandboxDir('fanout');
const timeout = 120_000;
let sandbox;

before(() => {
  sandbox = startSandbox(dir, 3);
});

after(() => stopSandbox(dir));

assertsTheAddonBuild(addonTarget);

const statements = [
  'CREATE DATABASE IF NOT EXISTS fan',
  ...Array.from({ length: 5 }, (_, i) => `CREATE TABLE IF NOT EXISTS fan.t${i} (id UInt64, secret String DEFAULT 'hunter2') ENGINE = Memory`),
];

const props = (extra = {}) => sandboxProps(sandbox, statements, extra);

test('pods are applied in parallel, each in order, and every step is reported as it happens', { timeout }, async () => {
  const events = [];
  const pods = sandbox.info.pods;
  await sandbox.clearLogs();
  // The first pod's exec is set up for 5 s before its process starts (as a slow kubelet would),
  // so that in parallel the third pod starts before the first ends even on a loaded machine,
  // where one pod's whole list in one exec can end before another's first statement is seen.
  await sandbox.control('PUT', '/sandbox/exec-setup', { pod: pods[0], ms: 5000 });
  let result;
  try {
    result = await apply('fan-schema', props(), undefined, { onEvent: (e) => events.push(e) });
  } finally {
    await sandbox.control('PUT', '/sandbox/exec-setup', { pod: pods[0], ms: 0 });
  }
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(result.appliedTo, pods);

  // The exec log: each pod got the list in order, and the live-schema check after it, in one exec
  // of its own (execMode 'perPod').
  const log = await sandbox.control('GET', '/sandbox/exec-log');
  const isCheck = (e) => e.stdin.startsWith('CREATE DATABASE _clickhouse_schema_verify_');
  const execs = statementLog(log);
  for (const pod of pods) {
    assert.deepEqual(execs.filter((e) => e.pod === pod && !isCheck(e)).map((e) => e.stdin), statements, pod);
    assert.equal(execs.filter((e) => e.pod === pod && isCheck(e) && e.batch !== undefined).length, 1, `${pod}'s check`);
    assert.equal(log.filter((e) => e.pod === pod).length, 1, `one exec for ${pod}'s list and its check`);
  }

  const at = (kind, pod) => events.findIndex((e) => e.kind === kind && e.pod === pod);
  assert.ok(at('statementStarted', pods[2]) < at('podDone', pods[0]), 'the third pod started before the first finished');

  const kinds = events.map((e) => e.kind);
  assert.equal(kinds[0], 'podsSelected');
  assert.deepEqual(events[0].pods, pods);
  assert.equal(kinds.filter((k) => k === 'statementStarted').length, statements.length * pods.length);
  assert.equal(kinds.filter((k) => k === 'statementFinished').length, statements.length * pods.length);
  assert.equal(kinds.filter((k) => k === 'verified').length, pods.length);
  assert.ok(kinds.includes('relist'));
  const started = events.find((e) => e.kind === 'statementStarted' && e.pod === pods[1] && e.index === 2);
  // Numbered from 0, as the error's statementIndex and message number it.
  assert.match(started.message, /^statement 2 \(6 in all\) on chi-sandbox-sandbox-0-1-0 \([0-2] of 3 pods done\)$/);
  // Each pod says when it is done, so the count a progress line shows reaches 3 of 3.
  const done = events.filter((e) => e.kind === 'podDone');
  assert.deepEqual(done.map((e) => e.pod).sort(), pods);
  assert.deepEqual(done.map((e) => e.podsDone), [1, 2, 3]);
  assert.equal(done[2].message, `${done[2].pod} done (3 of 3 pods done)`);
  assert.ok(events.filter((e) => e.kind === 'statementFinished').every((e) => e.exitCode === 0 && e.durationMs >= 0));
  const json = JSON.stringify(events);
  assert.doesNotMatch(json, /CREATE|hunter2|fan\.t/, 'no statement text in any event');
});

test('a statement failing on every pod at once is reported for the first pod by name, with the tally', { timeout }, async () => {
  // The first statement fails everywhere: all three pods send it before any answer comes back
  // (parallelism 8), so all three fail, and the tie is broken by pod name, every time.
  const broken = [
    'CREATE TABLE fan.broken (id UInt64) ENGINE = NoSuchEngine',
    'CREATE TABLE IF NOT EXISTS fan.after_broken (id UInt64) ENGINE = Memory',
    ...statements,
  ];
  for (let run = 0; run < 3; run++) {
    await sandbox.clearLogs();
    const err = await rejection(apply('fan-schema', props({ statements: broken, verify: 'off' })));
    assert.equal(err.code, 'E_STATEMENT_FAILED');
    assert.equal(err.statementIndex, 0);
    assert.equal(err.pod, sandbox.info.pods[0]);
    assert.match(err.message, /This pass over 3 pod\(s\), up to 8 at once: 0 completed, 3 failed, 0 not finished\.$/);
    const execs = await sandbox.control('GET', '/sandbox/exec-log');
    assert.deepEqual(execs.map((e) => e.pod).sort(), sandbox.info.pods, 'one exec per pod, its script');
    for (const pod of sandbox.info.pods) {
      assert.equal(sandbox.query(pod, "EXISTS TABLE fan.after_broken"), '0', `${pod} went on past the failure`);
    }
  }
});

// One exec per pod (execMode 'perPod', the default): the pod's list is one script, and the error of
// a statement still names it (crates/core/src/reconcile/batch.rs).

test('a failure at each position of a 12-statement list names that statement, and nothing after it runs', { timeout: 600_000 }, async () => {
  for (let failing = 0; failing < 12; failing++) {
    const db = `pos${failing}`;
    const list = Array.from({ length: 12 }, (_, i) => {
      if (i === failing) return `CREATE TABLE ${db}.bad (id UInt64) ENGINE = NoSuchEngine`;
      if (i === 0) return `CREATE DATABASE IF NOT EXISTS ${db}`;
      return `CREATE TABLE IF NOT EXISTS ${db}.t${String(i).padStart(2, '0')} (id UInt64) ENGINE = Memory`;
    });
    await sandbox.clearLogs();
    const err = await rejection(apply('fan-positions', props({ statements: list, verify: 'off' })));
    assert.equal(err.code, 'E_STATEMENT_FAILED', err.message);
    assert.equal(err.statementIndex, failing, err.message);
    assert.equal(err.pod, sandbox.info.pods[0]);
    assert.match(err.message, new RegExp(`^ClickHouseSchema 'fan-positions': statement ${failing} failed on pod ${sandbox.info.pods[0]}\\n`));
    assert.equal(typeof err.clickHouseCode, 'number', err.message);
    const log = await sandbox.control('GET', '/sandbox/exec-log');
    assert.equal(log.length, sandbox.info.pods.length, 'one exec per pod');
    // What ran is what the server has: the tables before the failing statement, none after it.
    const before = list.slice(1, failing).map((s) => / (pos\d+\.t\d+) /.exec(s)[1].split('.')[1]);
    for (const pod of sandbox.info.pods) {
      assert.deepEqual(sandbox.tablesOn(pod, db), before, `${pod}, statement ${failing} failing`);
    }
  }
});

test('a statement whose output looks like markers moves no attribution', { timeout }, async () => {
  // Lines of the markers' shape, of another nonce, printed by a statement of the list.
  const imitation =
    "SELECT arrayJoin(['0123456789abcdef01234567:2', '0123456789abcdef01234567:3', '0123456789abcdef01234567:end'])";
  const ok = ['CREATE DATABASE IF NOT EXISTS imit', imitation, 'CREATE TABLE IF NOT EXISTS imit.t (id UInt64) ENGINE = Memory'];
  await apply('fan-imitation', props({ statements: ok, verify: 'off' }));
  for (const pod of sandbox.info.pods) assert.deepEqual(sandbox.tablesOn(pod, 'imit'), ['t'], pod);

  const failing = [...ok.slice(0, 2), 'CREATE TABLE imit.bad (id UInt64) ENGINE = NoSuchEngine', ok[2]];
  const err = await rejection(apply('fan-imitation', props({ statements: failing, verify: 'off' })));
  assert.equal(err.code, 'E_STATEMENT_FAILED');
  assert.equal(err.statementIndex, 2, err.message);
});

test('a pod whose script is cut after it started is stopped, runs the whole list again and the apply succeeds', { timeout }, async () => {
  const list = [
    'CREATE DATABASE IF NOT EXISTS cut',
    ...Array.from({ length: 4 }, (_, i) => `CREATE TABLE IF NOT EXISTS cut.t${i} (id UInt64) ENGINE = Memory`),
  ];
  const victim = sandbox.info.pods[1];
  await sandbox.clearLogs();
  // The connection drops once the script has printed its first marker (statement 0 sent).
  await sandbox.control('POST', '/sandbox/faults', {
    kind: 'drop_exec',
    pod: victim,
    argv_contains: '--multiquery --query_id',
    after: 'after_stdout',
  });
  const events = [];
  const result = await apply('fan-cut', props({ statements: list, verify: 'off' }), undefined, { onEvent: (e) => events.push(e) });
  assert.deepEqual(result.appliedTo, sandbox.info.pods);
  const log = await sandbox.control('GET', '/sandbox/exec-log');
  const scripts = log.filter((e) => e.pod === victim && batchStatements(e.stdin));
  assert.deepEqual(scripts.map((e) => e.outcome), ['fault_drop', 'completed'], 'the cut script, then the whole list again');
  assert.ok(
    log.some((e) => e.pod === victim && e.stdin.includes('KILL QUERY WHERE') && e.id > scripts[0].id && e.id < scripts[1].id),
    'stopped by its query id before the retry',
  );
  const retry = events.find((e) => e.kind === 'retry');
  assert.equal(retry.message, `the script of statements 0 to 4 on ${victim}: attempt 1 failed in transport; trying again in 100 ms`);
  for (const pod of sandbox.info.pods) assert.deepEqual(sandbox.tablesOn(pod, 'cut'), ['t0', 't1', 't2', 't3'], pod);
});
