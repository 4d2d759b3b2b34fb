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
  await sandbox.clearLogs();
  const result = await apply('fan-schema', props(), undefined, { onEvent: (e) => events.push(e) });
  await new Promise((resolve) => setImmediate(resolve));
  const pods = sandbox.info.pods;
  assert.deepEqual(result.appliedTo, pods);

  // The exec log: each pod got the list in order; the pods overlapped in time.
  const execs = (await sandbox.control('GET', '/sandbox/exec-log')).filter(
    (e) => !e.stdin.startsWith('CREATE DATABASE _clickhouse_schema_verify_'),
  );
  for (const pod of pods) {
    assert.deepEqual(execs.filter((e) => e.pod === pod).map((e) => e.stdin), statements, pod);
  }
  const firstOf = (pod) => execs.findIndex((e) => e.pod === pod);
  const lastOf = (pod) => execs.findLastIndex((e) => e.pod === pod);
  assert.ok(firstOf(pods[2]) < lastOf(pods[0]), 'the third pod started before the first finished');

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
  const broken = ['CREATE TABLE fan.broken (id UInt64) ENGINE = NoSuchEngine', ...statements];
  for (let run = 0; run < 3; run++) {
    await sandbox.clearLogs();
    const err = await rejection(apply('fan-schema', props({ statements: broken, verify: 'off' })));
    assert.equal(err.code, 'E_STATEMENT_FAILED');
    assert.equal(err.statementIndex, 0);
    assert.equal(err.pod, sandbox.info.pods[0]);
    assert.match(err.message, /This pass over 3 pod\(s\), up to 8 at once: 0 completed, 3 failed, 0 not finished\.$/);
    const execs = await sandbox.control('GET', '/sandbox/exec-log');
    assert.deepEqual(execs.map((e) => e.stdin), [broken[0], broken[0], broken[0]], 'no pod went on past the failure');
  }
});
