// The client command on the images users run (issue 25, item 4), against a sandbox of two pods
// whose containers are changed one at a time through the sandbox's control API: a container
// environment that names another server in CLICKHOUSE_HOST (which a current client reads when
// no host is given), an image without a shell (the `-distroless` tags), and BusyBox's `timeout`
// before 1.35, which refuses `-k`.
import { after, afterEach, before, test } from './lib/engine.mjs';
import assert from 'node:assert/strict';

import { addonTarget, apply } from '../dist/index.js';
import { assertsTheAddonBuild } from './binding.mjs';
import { rejection } from './lib/rejection.mjs';
import { sandboxProps } from './lib/sandbox-props.mjs';
import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';

const dir = sandboxDir('images');
const timeout = 120_000;
let sandbox;
let pod;
let other;
let stock;

before(async () => {
  sandbox = startSandbox(dir, 2);
  [pod, other] = sandbox.info.pods;
  stock = (await sandbox.control('GET', `/sandbox/pods/${pod}`)).containers;
});

after(() => stopSandbox(dir));

// Every test changes `pod`'s container; the next one starts from the stock container again.
afterEach(async () => {
  await sandbox.control('PUT', `/sandbox/pods/${pod}/containers`, stock);
});

assertsTheAddonBuild(addonTarget);

/** Gives `pod`'s container `change` on top of the stock one. */
async function container(change) {
  await sandbox.control('PUT', `/sandbox/pods/${pod}/containers`, stock.map((c) => ({ ...c, ...change(c) })));
}

const statements = (db) => [
  `CREATE DATABASE IF NOT EXISTS ${db}`,
  `CREATE TABLE IF NOT EXISTS ${db}.events (id UInt64) ENGINE = MergeTree ORDER BY id`,
];

test('CLICKHOUSE_HOST in the container environment does not send the statements to another server', { timeout }, async () => {
  // A current client reads CLICKHOUSE_HOST when argv names no host; here it names the other pod,
  // where (on the 26.9 engine) no server listens. 18.16's client never reads it.
  await container((c) => ({ env: [...c.env, ['CLICKHOUSE_HOST', other]] }));
  const result = await apply('img-host', sandboxProps(sandbox, statements('img_host')));
  assert.deepEqual(result.appliedTo, [pod, other]);
  await container(() => ({}));
  assert.deepEqual(sandbox.tablesOn(pod, 'img_host'), ['events'], 'the table is on the pod whose environment named another host');
});

test('an image without a shell fails once, naming the pod and the missing shell, and records nothing', { timeout }, async () => {
  await container(() => ({ image: 'clickhouse/clickhouse-server:25.8-distroless', userland: 'distroless' }));
  await sandbox.clearLogs();
  const events = [];
  const err = await rejection(
    apply('img-distroless', sandboxProps(sandbox, statements('img_distroless'), { retry: { maxAttempts: 3, backoffMs: 100 } }), undefined, {
      onEvent: (e) => events.push(e),
    }),
  );
  assert.equal(err.code, 'E_IMAGE_UNSUPPORTED', err.message);
  assert.equal(err.pod, pod);
  assert.equal(err.statementIndex, 0);
  assert.match(err.message, new RegExp(`statement 0 could not run on pod ${pod}: the container has no \`sh\``));
  assert.match(err.message, /-distroless/);
  assert.match(err.message, /not retried/);
  const onPod = (await sandbox.control('GET', '/sandbox/exec-log')).filter((e) => e.pod === pod);
  assert.equal(onPod.length, 1, 'one exec on the pod: the image was not tried again');
  assert.equal(onPod[0].outcome, 'spawn_failed');
  assert.deepEqual(events.filter((e) => e.kind === 'retry' && e.pod === pod), []);
});

test("BusyBox's timeout without -k still runs every statement, bounded by timeout alone", { timeout }, async () => {
  await container(() => ({ image: 'example/clickhouse-alpine:3.15', userland: 'busybox-1.34' }));
  await sandbox.clearLogs();
  const result = await apply('img-busybox', sandboxProps(sandbox, statements('img_busybox')));
  assert.deepEqual(result.appliedTo, [pod, other]);
  assert.deepEqual(sandbox.tablesOn(pod, 'img_busybox'), ['events']);
  const onPod = (await sandbox.control('GET', '/sandbox/exec-log')).filter((e) => e.pod === pod);
  assert.ok(onPod.length >= 2 && onPod.every((e) => e.exit_code === 0), JSON.stringify(onPod.map((e) => [e.outcome, e.exit_code])));
});
