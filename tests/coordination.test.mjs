// Coordination against the sandbox's real Lease API and real ClickHouse
// servers: the lease serializing concurrent deploys of one resource, the
// ledger on every pod, lost-state recovery, adoption through Alchemy, and
// status(). What reached the cluster is read from the sandbox's exec and API
// logs; the lease from its API.
import { after, before, test, test1816 } from './lib/engine.mjs';
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { startSandbox, stopSandbox } from '../scripts/lib/sandbox-client.mjs';
import { sandboxDir } from './lib/sandbox-dir.mjs';
import { batchStatements, statementLog } from './lib/batch.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
// Alchemy's local state goes under the cwd as it is when alchemy is first imported.
const stateRoot = mkdtempSync(join(tmpdir(), 'alchemy-ch-coordination-'));
process.chdir(stateRoot);
const Alchemy = await import('alchemy');
const Layer = await import('effect/Layer');
const Effect = await import('effect/Effect');
const { deployStack } = await import('../dist/examples/runtime.js');
const { addonTarget, adopt, apply, clickHouseSchema, clickHouseSchemaProvider, destroy, fingerprint, status } = await import('../dist/index.js');
const { assertsTheAddonBuild } = await import('./binding.mjs');
const { rejection } = await import('./lib/rejection.mjs');

assertsTheAddonBuild(addonTarget);

// See tests/lib/sandbox-dir.mjs.
const dir = sandboxDir('coordination');
const timeout = 180_000;
let sandbox;

before(() => {
  sandbox = startSandbox(dir, 3);
});

after(() => {
  stopSandbox(dir);
  process.chdir(root);
  rmSync(stateRoot, { recursive: true, force: true });
});

const S0 = 'CREATE DATABASE IF NOT EXISTS coord';
// Not idempotent: running it twice on a pod fails, so "ran once" is also what ClickHouse says.
const S1 = 'CREATE TABLE coord.events (id UInt64, at DateTime) ENGINE = MergeTree ORDER BY id';
const LEDGER = { database: 'ops' };

function props(extra = {}) {
  return {
    target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
    statements: [S0, S1],
    // The lease user: the minimal rights plus leases.
    kubeConfig: { kubeconfigPath: sandbox.kubeconfig, context: 'sandbox-lease' },
    retry: { maxAttempts: 3, backoffMs: 100 },
    waitForPod: { timeoutMs: 60_000 },
    verify: 'off',
    lease: { ttlSeconds: 10 },
    ledger: LEDGER,
    ...extra,
  };
}

const execLog = () => sandbox.control('GET', '/sandbox/exec-log');
const apiLog = () => sandbox.control('GET', '/sandbox/api-log');
const leaseCalls = (api) => api.filter((r) => r.path.includes('/leases'));
// A pod's script (execMode 'perPod') counts once for each statement it carries.
const statementRuns = (execs, statement) => statementLog(execs).filter((e) => e.stdin === statement);
/** kubectl's JSON for `args` against the sandbox (admin), or undefined when it fails (not found). */
function kubectlJson(args) {
  try {
    return JSON.parse(execFileSync('kubectl', ['--kubeconfig', sandbox.kubeconfig, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }));
  } catch {
    return undefined;
  }
}
/** `kubectlJson` without blocking the event loop (see `queryAsync`). */
function kubectlJsonAsync(args) {
  return new Promise((resolve) => {
    execFile('kubectl', ['--kubeconfig', sandbox.kubeconfig, ...args], { encoding: 'utf8' }, (error, stdout) => {
      if (error) return resolve(undefined);
      try {
        resolve(JSON.parse(stdout));
      } catch {
        resolve(undefined);
      }
    });
  });
}
const leaseNameOf = (id) => kubectlJson(['get', 'leases', '-n', 'sandbox', '-o', 'json'])?.items.map((l) => l.metadata.name).find((n) => n.includes(id));

test('five concurrent applies: every statement ran exactly once per pod; the others waited and found it in the ledger', { timeout }, async () => {
  await sandbox.clearLogs();
  const events = Array.from({ length: 5 }, () => []);
  const results = await Promise.all(
    events.map((list) => apply('coord-five', props(), undefined, { onEvent: (e) => list.push(e) })),
  );
  await new Promise((resolve) => setImmediate(resolve));
  const execs = await execLog();
  for (const pod of sandbox.info.pods) {
    for (const statement of [S0, S1]) {
      assert.equal(statementRuns(execs, statement).filter((e) => e.pod === pod).length, 1, `${statement} on ${pod}`);
    }
  }
  // One of them applied to every pod; the other four ran nothing and recorded every pod from the ledger.
  const ran = results.filter((r) => r.appliedTo.length > 0);
  assert.equal(ran.length, 1);
  assert.deepEqual(ran[0].appliedTo, sandbox.info.pods);
  for (const r of results) {
    assert.equal(r.changed, true);
    assert.deepEqual(r.state.podNames, sandbox.info.pods);
    assert.equal(r.state.fingerprint, ran[0].state.fingerprint);
  }
  const waited = events.filter((list) => list.some((e) => e.kind === 'leaseWaiting'));
  assert.ok(waited.length >= 3, `at least three waited for the lease, ${waited.length} did`);
  for (const list of events) assert.equal(list.filter((e) => e.kind === 'leaseTaken').length, 1);
  // The ledger on each pod: one row of this resource with this fingerprint.
  for (const pod of sandbox.info.pods) {
    const rows = sandbox.query(pod, "SELECT fingerprint, statement_count, pod FROM ops.clickhouse_schema_ledger WHERE resource_id = 'coord-five' AND event = 'applied' FORMAT TSV");
    assert.equal(rows, `${ran[0].state.fingerprint}\t2\t${pod}`, pod);
  }
  // Released: no holder left.
  const name = leaseNameOf('coord-five');
  assert.ok(name, 'the lease exists');
  assert.equal(kubectlJson(['get', 'lease', name, '-n', 'sandbox', '-o', 'json']).spec.holderIdentity, undefined);

  // An unchanged deploy takes no lease and reads no ledger: one pod list, nothing else.
  await sandbox.clearLogs();
  const again = await apply('coord-five', props(), ran[0].state);
  assert.equal(again.changed, false);
  assert.equal(leaseCalls(await apiLog()).length, 0);
  assert.equal((await execLog()).length, 0);
});

test('status() shows each pod\'s ledger entry, and which pods are behind a changed schema', { timeout }, async () => {
  const now = await status('coord-five', props());
  assert.deepEqual(now.pods.map((p) => p.pod), sandbox.info.pods);
  for (const p of now.pods) {
    assert.equal(p.read, true);
    assert.equal(p.current, true);
    assert.equal(p.fingerprint, now.fingerprint);
    assert.equal(p.statementCount, 2);
    assert.match(p.appliedAt, /^\d{4}-\d\d-\d\dT/);
  }
  const changed = await status('coord-five', props({ statements: [S0, S1, 'CREATE TABLE IF NOT EXISTS coord.more (id UInt64) ENGINE = Memory'] }));
  assert.notEqual(changed.fingerprint, now.fingerprint);
  for (const p of changed.pods) {
    assert.equal(p.current, false, 'behind the new statements');
    assert.equal(p.fingerprint, now.fingerprint, 'the ledger still holds the applied one');
  }
  const err = await rejection(status('coord-five', props({ ledger: undefined })));
  assert.equal(err.code, 'E_INVALID_CONFIG');
  assert.equal(err.issues[0].path, 'ledger');
});

test('a holder killed mid-apply is taken over once its lease expires, and the taker finishes the work', { timeout }, async () => {
  const slow = props({ statements: ['CREATE DATABASE IF NOT EXISTS coord_kill', 'SELECT sleep(3)', 'CREATE TABLE IF NOT EXISTS coord_kill.t (id UInt64) ENGINE = Memory'], lease: { ttlSeconds: 6 } });
  // The holder: another process, applying with the same lease.
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', `import { apply } from ${JSON.stringify(join(root, 'dist/index.js'))}; await apply('coord-kill', ${JSON.stringify(slow)});`],
    { stdio: 'ignore', env: process.env },
  );
  let holder;
  for (let i = 0; i < 200 && !holder; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    const name = leaseNameOf('coord-kill');
    holder = name && kubectlJson(['get', 'lease', name, '-n', 'sandbox', '-o', 'json'])?.spec?.holderIdentity;
  }
  assert.ok(holder, 'the child took the lease');
  assert.ok(holder.includes(`/${child.pid}/`), `the holder names the child's pid: ${holder}`);
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
  // The dead holder's last renewal: the lease is its to keep until that plus its duration.
  const held = kubectlJson(['get', 'lease', leaseNameOf('coord-kill'), '-n', 'sandbox', '-o', 'json']).spec;
  assert.equal(held.holderIdentity, holder);
  const heldUntil = Date.parse(held.renewTime) + held.leaseDurationSeconds * 1000;
  const events = [];
  let takenAt;
  const result = await apply('coord-kill', slow, undefined, {
    onEvent: (e) => {
      events.push(e);
      if (e.kind === 'leaseTaken') takenAt = Date.now();
    },
  });
  assert.ok(events.some((e) => e.kind === 'leaseWaiting' && e.holder === holder), 'it waited for the dead holder');
  // Judged against the holder's own last renewal rather than a fixed delay, which a busy machine stretches.
  assert.ok(
    takenAt >= heldUntil,
    `taken over once the lease ran out (${new Date(heldUntil).toISOString()}), not before (${new Date(takenAt).toISOString()})`,
  );
  assert.deepEqual(result.state.podNames, sandbox.info.pods);
  for (const pod of sandbox.info.pods) assert.deepEqual(sandbox.tablesOn(pod, 'coord_kill'), ['t'], pod);
  const name = leaseNameOf('coord-kill');
  assert.ok(kubectlJson(['get', 'lease', name, '-n', 'sandbox', '-o', 'json']).spec.leaseTransitions >= 1);
});

test('a holder that works longer than its TTL keeps the lease by renewing it; the second deploy waits for it', { timeout }, async () => {
  // 3 x 2 s of statements on each pod, the pods one after another: about 18 s against a 6 s lease.
  const long = props({
    statements: ['CREATE DATABASE IF NOT EXISTS coord_long', 'SELECT sleep(2)', 'SELECT sleep(2)', 'SELECT sleep(2)'],
    lease: { ttlSeconds: 6 },
    parallelism: 1,
  });
  await sandbox.clearLogs();
  // The second starts once the first holds the lease, however long that takes on a busy machine.
  let firstHolds;
  const firstTook = new Promise((resolve) => (firstHolds = resolve));
  const first = apply('coord-long', long, undefined, { onEvent: (e) => e.kind === 'leaseTaken' && firstHolds() });
  await firstTook;
  const events = [];
  const second = apply('coord-long', long, undefined, { onEvent: (e) => events.push(e) });
  const [a, b] = await Promise.all([first, second]);
  assert.deepEqual(a.appliedTo, sandbox.info.pods, 'the first finished everything, its lease renewed throughout');
  assert.deepEqual(b.appliedTo, [], 'the second found it all in the ledger');
  const waited = events.find((e) => e.kind === 'leaseTaken');
  assert.ok(waited.waitedMs >= 10_000, `the second waited for the whole first apply (${waited.waitedMs} ms)`);
  const sleeps = statementRuns(await execLog(), 'SELECT sleep(2)');
  assert.equal(sleeps.length, 3 * sandbox.info.pods.length, 'each ran once per pod');
});

test('409 and 500 from the Lease API are retried; the apply goes through', { timeout }, async () => {
  await sandbox.control('POST', '/sandbox/faults', { kind: 'lease_error', verb: 'get', count: 1, status: 500 });
  await sandbox.control('POST', '/sandbox/faults', { kind: 'lease_error', verb: 'create', count: 1, status: 409 });
  await sandbox.control('POST', '/sandbox/faults', { kind: 'lease_error', verb: 'update', count: 1, status: 500 });
  const events = [];
  const result = await apply('coord-faults', props({ statements: [S0] }), undefined, { onEvent: (e) => events.push(e) });
  assert.deepEqual(result.appliedTo, sandbox.info.pods);
  assert.ok(events.some((e) => e.kind === 'retry' && /the lease/.test(e.message)), 'a retry of the lease was reported');
  await sandbox.control('DELETE', '/sandbox/faults');
});

test('the minimal RBAC (no leases) is refused with the verbs to grant; nothing ran', { timeout }, async () => {
  await sandbox.clearLogs();
  const err = await rejection(apply('coord-rbac', props({ kubeConfig: { kubeconfigPath: sandbox.kubeconfig, context: 'sandbox-minimal' } })));
  assert.equal(err.code, 'E_KUBERNETES_API');
  assert.match(err.message, /forbidden/);
  assert.match(err.message, /needs get, create and update on leases \(API group coordination\.k8s\.io\) in namespace 'sandbox'/);
  assert.equal((await execLog()).length, 0);
});

test('a ledger that cannot be written fails the apply with E_LEDGER_FAILED, naming the pod and the grants', { timeout }, async () => {
  // A table of another shape in the ledger's place.
  for (const pod of sandbox.info.pods) {
    sandbox.query(pod, 'CREATE DATABASE IF NOT EXISTS coord_bad');
    sandbox.query(pod, 'CREATE TABLE IF NOT EXISTS coord_bad.notledger (x UInt8) ENGINE = Memory');
  }
  const ledger = { database: 'coord_bad', table: 'notledger' };
  const first = 'CREATE DATABASE IF NOT EXISTS coord_bad_ran';
  const second = 'CREATE TABLE IF NOT EXISTS coord_bad_ran.t (id UInt64) ENGINE = Memory';
  // With no state, the ledger is read first, and that fails.
  let err = await rejection(apply('coord-ledger-bad', props({ statements: [first], ledger, lease: false })));
  assert.equal(err.code, 'E_LEDGER_FAILED');
  assert.ok(sandbox.info.pods.includes(err.pod), err.pod);
  assert.match(err.message, /the ledger `coord_bad`.`notledger` could not be read on pod/);
  assert.match(err.message, /grant them, or remove the ledger prop/);
  assert.match(err.message, /The table lacks the ledger's columns/);
  // With a state (recorded without the ledger), the first write is the started row, before any statement.
  const { state } = await apply('coord-ledger-bad', props({ statements: [first], ledger: undefined, lease: false }));
  await sandbox.clearLogs();
  err = await rejection(apply('coord-ledger-bad', props({ statements: [first, second], ledger, lease: false }), state));
  assert.equal(err.code, 'E_LEDGER_FAILED');
  assert.match(err.message, /the ledger `coord_bad`.`notledger` could not be written before the statements on pod/);
  assert.match(err.message, /No statement ran on that pod/);
  assert.match(err.message, /ADD COLUMN seq UInt64, ADD COLUMN event String/);
  // The statements went in the pods' scripts after the row (execMode 'perPod'); none of them ran.
  const execs = await execLog();
  assert.ok(execs.length > 0 && execs.every((e) => batchStatements(e.stdin)?.opening.includes('coord_bad')), 'the row first in each script');
  // (The first statement ran in the apply that made the state; the second is new.)
  for (const pod of sandbox.info.pods) {
    assert.equal(sandbox.query(pod, "SELECT count() FROM system.tables WHERE database = 'coord_bad_ran' AND name = 't'"), '0', `no statement ran on ${pod}`);
  }
});

// Through Alchemy: `read` with no state is the adoption probe.
const STAGE = 'test';
function stack(name, id, extra = {}) {
  return Alchemy.Stack(
    name,
    { providers: Layer.mergeAll(clickHouseSchemaProvider), state: Alchemy.localState() },
    Effect.gen(function* () {
      const schema = yield* clickHouseSchema(id, props({ statements: [S0, 'CREATE TABLE IF NOT EXISTS coord.adopted (id UInt64) ENGINE = MergeTree ORDER BY id'], ...extra }));
      return { podNames: schema.podNames };
    }),
  );
}
const stateFile = (name, id) => join(stateRoot, '.alchemy/state', name, STAGE, `${id}.json`);

test('a lost Alchemy state with a ledger re-runs nothing: read adopts the schema as this resource\'s', { timeout }, async () => {
  await deployStack(stack('lost', 'coord-adopt'), STAGE);
  assert.ok(existsSync(stateFile('lost', 'coord-adopt')));
  rmSync(join(stateRoot, '.alchemy/state/lost'), { recursive: true, force: true });
  await sandbox.clearLogs();
  const outputs = await deployStack(stack('lost', 'coord-adopt'), STAGE);
  assert.deepEqual(outputs.podNames, sandbox.info.pods);
  const execs = await execLog();
  assert.equal(execs.filter((e) => !e.stdin.startsWith('SELECT resource_id')).length, 0, 'only ledger reads ran');
  assert.equal(execs.length, sandbox.info.pods.length, 'one ledger read per pod');
  assert.ok(existsSync(stateFile('lost', 'coord-adopt')), 'the state is back');
});

/** Alchemy's own refusal to adopt (not a ClickHouseSchemaError). */
async function refusedToAdopt(promise, id) {
  const err = await promise.then(
    () => assert.fail('expected Alchemy to refuse'),
    (e) => e,
  );
  assert.equal(err._tag, 'OwnedBySomeoneElse', String(err));
  assert.match(err.message, new RegExp(`Cannot adopt resource '${id}'`));
}

test('read refuses a schema another resource id applied, and objects present with no ledger entry', { timeout }, async () => {
  await sandbox.clearLogs();
  await refusedToAdopt(deployStack(stack('other', 'coord-other-id'), STAGE), 'coord-other-id');
  // The same objects, a ledger in another table that never heard of them.
  await refusedToAdopt(
    deployStack(stack('noledger', 'coord-no-ledger', { ledger: { database: 'ops', table: 'other_ledger' } }), STAGE),
    'coord-no-ledger',
  );
  const execs = await execLog();
  assert.equal(execs.filter((e) => e.stdin.startsWith('CREATE TABLE')).length, 0, 'no statement ran');
  // What the addon says, directly.
  const foreign = await adopt('coord-other-id', props({ statements: [S0, 'CREATE TABLE IF NOT EXISTS coord.adopted (id UInt64) ENGINE = MergeTree ORDER BY id'] }));
  assert.equal(foreign.ownership, 'unowned');
  assert.match(foreign.reason, /applied by resource 'coord-adopt'/);
  const none = await adopt('coord-nothing', props({ statements: ['CREATE DATABASE IF NOT EXISTS coord_never_made'] }));
  assert.equal(none.ownership, 'absent');
  const noLedger = await adopt('coord-nothing', props({ ledger: undefined }));
  assert.equal(noLedger.ownership, 'absent');
});

test('a deploy interrupted through Alchemy stops, releases the lease and records nothing', { timeout }, async () => {
  const id = 'coord-cancel';
  const S0_CANCEL = 'CREATE DATABASE IF NOT EXISTS coord_cancel';
  const last = 'CREATE TABLE coord_cancel.t (id UInt64) ENGINE = Memory';
  const slow = props({
    statements: [S0_CANCEL, 'SELECT sleep(3)', last],
    lease: { ttlSeconds: 60 },
    parallelism: 1,
    // An exec per statement, so the exec log shows where the deploy is on either engine (a modern
    // pod's stand-in client holds the pod while a script runs); a script's cancel has its own tests.
    execMode: 'perStatement',
  });
  const cancelStack = Alchemy.Stack(
    'cancel',
    { providers: Layer.mergeAll(clickHouseSchemaProvider), state: Alchemy.localState() },
    Effect.gen(function* () {
      const schema = yield* clickHouseSchema(id, slow);
      return { podNames: schema.podNames };
    }),
  );
  await sandbox.clearLogs();
  const controller = new AbortController();
  const deploying = deployStack(cancelStack, STAGE, { signal: controller.signal });
  // Interrupted (as Ctrl-C interrupts the CLI) while the sleep runs on the first pod, the lease
  // held: the first statement ran there, and the next exec is running.
  const first = sandbox.info.pods[0];
  const inFlight = (execs) => {
    const at = execs.findIndex((e) => e.pod === first && e.stdin === S0_CANCEL);
    return at >= 0 ? execs.slice(at + 1).find((e) => e.pod === first && e.outcome === 'running') : undefined;
  };
  let running;
  for (let i = 0; i < 600 && !(running = inFlight(await execLog())); i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.ok(running, 'the exec after the first statement was seen running');
  controller.abort();
  const aborted = Date.now();
  const outcome = await deploying.then(
    () => 'resolved',
    (error) => error,
  );
  const settled = Date.now() - aborted;
  assert.notEqual(outcome, 'resolved', 'the interrupted deploy does not resolve');
  // Released by the time the deploy settled, not left to lapse after 60 s.
  const name = leaseNameOf(id);
  assert.ok(name, 'the lease was taken');
  assert.equal(kubectlJson(['get', 'lease', name, '-n', 'sandbox', '-o', 'json']).spec.holderIdentity, undefined, 'released');
  // Nothing recorded as applied: no ledger row but the first pod's `started` (the record that a
  // change began there and did not finish), no outputs in Alchemy's state, and the statement
  // after the sleep never started.
  for (const pod of sandbox.info.pods) {
    // The ledger table exists only once a deploy wrote to it (another test, when run before this one).
    const table = sandbox.query(pod, "SELECT count() FROM system.tables WHERE database = 'ops' AND name = 'clickhouse_schema_ledger'");
    const rows = table === '0' ? '' : sandbox.query(pod, `SELECT event FROM ops.clickhouse_schema_ledger WHERE resource_id = '${id}' ORDER BY seq FORMAT TSV`);
    assert.equal(rows, pod === first ? 'started' : '', pod);
  }
  const recorded = existsSync(stateFile('cancel', id)) ? readFileSync(stateFile('cancel', id), 'utf8') : '';
  assert.ok(!recorded.includes(fingerprint(slow, id)), `no outputs recorded: ${recorded}`);
  const execs = await execLog();
  assert.equal(statementRuns(execs, last).length, 0, 'the last statement never ran');
  // The exec in flight was closed, not waited for. (On a busy machine the abort can
  // come before the exec's stdin arrived: the log then holds it with no statement,
  // which is as good, so the exec is found by its id.)
  const closed = execs.find((e) => e.id === running.id);
  assert.ok(closed && closed.outcome !== 'completed', JSON.stringify(closed));
  assert.deepEqual(
    statementRuns(execs, 'SELECT sleep(3)').filter((e) => e.outcome === 'completed'),
    [],
    'the sleep never completed',
  );
  console.log(`settled ${settled} ms after the abort`);
});

// On a real cluster closing an exec does not stop its process: the kubelet keeps it running. The
// sandbox does the same here (`keep_running`), so a cancelled deploy's statement goes on in the
// pod after its exec was closed. Before, the lease was released at once all the same, and the next
// deploy's statements could run beside it.
test1816(
  'system.processes lists a running query only on a server',
  'a deploy cancelled mid-statement kills it before releasing the lease; nothing of the run is left running',
  { timeout },
  async () => {
    const id = 'coord-cancel-kill';
    // About a minute of work unless it is stopped: one 3 s sleep per one-row block.
    const LONG = 'SELECT sleep(3) FROM system.numbers LIMIT 20 SETTINGS max_block_size = 1';
    const long = props({
      statements: ['CREATE DATABASE IF NOT EXISTS coord_kill', LONG],
      // Long enough that a renewal delayed by a busy machine (the test command runs four
      // suites on two cores) never loses it: this test is about the cancel, not the lease's end.
      lease: { ttlSeconds: 60 },
      ledger: undefined,
      statementTimeoutMs: 90_000,
      parallelism: 1,
    });
    const first = sandbox.info.pods[0];
    // The statement by its text (this query's own text names system.processes, the statement's does not).
    // Asynchronous, as everything this test does while the deploy runs: a synchronous child
    // process would hold back the deploy's lease renewals on the WebAssembly addon.
    const running = async () =>
      Number(await sandbox.queryAsync(first, "SELECT count() FROM system.processes WHERE query LIKE '%sleep(3) FROM system.numbers%' AND query NOT LIKE '%system.processes%'"));
    await sandbox.clearLogs();
    await sandbox.control('PUT', '/sandbox/dropped-execs', { keep_running: true });
    try {
      const controller = new AbortController();
      const deploying = apply(id, long, undefined, { signal: controller.signal }).then(
        () => 'resolved',
        (error) => error,
      );
      let seen = 0;
      for (let i = 0; i < 600 && !(seen = await running()); i++) await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(seen, 1, 'the long statement was seen running on the first pod');
      const name = leaseNameOf(id);
      controller.abort();
      // Until the deploy settles: whenever the lease reads released, the statement is no longer
      // running (the lease is read first: a query seen after a release was running at the release).
      let settled = false;
      const outcome = deploying.finally(() => (settled = true));
      const seenReleasedWhileRunning = [];
      while (!settled) {
        const holder = (await kubectlJsonAsync(['get', 'lease', name, '-n', 'sandbox', '-o', 'json']))?.spec.holderIdentity;
        const still = await running();
        if (holder === undefined && still > 0) seenReleasedWhileRunning.push(still);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const err = await outcome;
      assert.notEqual(err, 'resolved');
      assert.deepEqual(seenReleasedWhileRunning, [], 'the lease was released while the statement still ran');
      assert.equal(err.code, 'E_CANCELLED', err.message);
      assert.equal(err.statementIndex, addonTarget === 'wasm32-wasi' ? 0 : 1);
      assert.equal(err.pod, first);
      // The native addon's kube-rs streams the script's output: statement 1's marker had arrived,
      // and the error names it. The WebAssembly build's transport hands it over at the end.
      if (addonTarget === 'wasm32-wasi') {
        assert.match(err.message, /cancelled while pod \S+ ran statements 0 to 1 as one script; its exec was closed, and which of them ran is unknown/);
      } else {
        assert.match(err.message, /cancelled while pod \S+ ran statements 0 to 1 as one script; its exec was closed, and statement 1 was the last seen starting/);
      }
      assert.match(err.message, /statements 0 to 1 \(one script\) on pod \S+ \(query id clickhouse-schema-[0-9a-f]{16}-st\d+-\S+\) was stopped with KILL QUERY and is not running any more/);
      assert.match(err.message, /The lease was released after that\./);
      assert.equal(kubectlJson(['get', 'lease', name, '-n', 'sandbox', '-o', 'json']).spec.holderIdentity, undefined, 'released');
      // Nothing of the run is left running: not on the server, not in the pod.
      for (const pod of sandbox.info.pods) {
        assert.equal(sandbox.query(pod, "SELECT count() FROM system.processes WHERE query_id LIKE 'clickhouse-schema-%'"), '0', pod);
      }
      const execs = await execLog();
      const left = execs.filter((e) => e.outcome.startsWith('left_running'));
      assert.equal(left.length, 1, JSON.stringify(execs.map((e) => [e.pod, e.outcome, e.stdin.slice(0, 40)])));
      for (let i = 0; i < 100 && (await execLog()).find((e) => e.id === left[0].id).outcome === 'left_running'; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.equal((await execLog()).find((e) => e.id === left[0].id).outcome, 'left_running_exited', 'its client ended');
      // The stop ran in an exec of its own, with no credential on any command line.
      const stop = execs.find((e) => e.stdin.includes('KILL QUERY WHERE'));
      assert.ok(stop, 'a stop exec');
      for (const e of execs) {
        const argv = e.argv.join(' ');
        assert.ok(!argv.includes(sandbox.info.passwords.default) && !argv.includes(sandbox.info.passwords.writer), argv);
      }
    } finally {
      await sandbox.control('PUT', '/sandbox/dropped-execs', { keep_running: false });
    }
  },
);

// A statement's exec dropped while it ran, on a real cluster, leaves its client running in the pod
// under the statement's query id. Before, the retry went out at once under the same id: the server
// refused it (code 216) as a failure of the statement, or, had it been accepted, the two would have
// run side by side.
test1816(
  'system.processes lists a running query only on a server',
  'a statement whose exec dropped while it ran is stopped before its retry; the two never run side by side',
  { timeout },
  async () => {
    const id = 'coord-drop-retry';
    const SLOW = 'SELECT sleep(2) FROM system.numbers LIMIT 3 SETTINGS max_block_size = 1';
    const first = sandbox.info.pods[0];
    const slow = props({ statements: [SLOW], ledger: undefined, parallelism: 1, lease: { ttlSeconds: 60 } });
    const running = async () =>
      Number(await sandbox.queryAsync(first, "SELECT count() FROM system.processes WHERE query LIKE '%sleep(2) FROM system.numbers%' AND query NOT LIKE '%system.processes%'"));
    await sandbox.clearLogs();
    await sandbox.control('PUT', '/sandbox/dropped-execs', { keep_running: true });
    // The cut comes 1.5 s into the statement's first exec on the first pod: the query runs on the server by then.
    await sandbox.control('POST', '/sandbox/faults', { kind: 'drop_exec', pod: first, count: 1, after: 'after_start', delay_ms: 1500 });
    try {
      let settled = false;
      const events = [];
      const deploying = apply(id, slow, undefined, { onEvent: (e) => events.push(e) }).finally(() => (settled = true));
      // The fault cuts the first exec that reaches the pod: the test's own looks at the pod wait
      // until the statement's exec has arrived (the exec log records a request as it arrives), or
      // on a loaded machine a look could be that first exec and be cut instead.
      while (!settled && !(await execLog()).some((e) => e.pod === first)) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      let most = 0;
      while (!settled) {
        most = Math.max(most, await running());
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const result = await deploying;
      assert.deepEqual(result.appliedTo, sandbox.info.pods, 'the apply went through on every pod');
      assert.equal(most, 1, 'never two copies of the statement at once on the first pod');
      assert.ok(events.some((e) => e.kind === 'retry' && e.pod === first), 'the retry was reported');
      const execs = (await execLog()).filter((e) => e.pod === first);
      const dropped = execs.findIndex((e) => e.outcome.startsWith('left_running'));
      const stop = execs.findIndex((e) => e.stdin.includes('KILL QUERY WHERE'));
      const retried = execs.findIndex((e, i) => i > dropped && e.stdin === SLOW);
      assert.ok(dropped >= 0 && dropped < stop && stop < retried, JSON.stringify(execs.map((e) => [e.outcome, e.stdin.slice(0, 30)])));
      const queryId = /--query_id='([^']+)'/.exec(execs[dropped].argv.join(' '))[1];
      assert.equal(/--query_id='([^']+)'/.exec(execs[retried].argv.join(' '))[1], queryId, 'the retry runs under the same id');
      assert.match(execs[stop].stdin, new RegExp(`KILL QUERY WHERE query_id IN \\('${queryId}'\\) SYNC FORMAT Null;`));
      assert.equal(execs[retried].outcome, 'completed');
    } finally {
      await sandbox.control('PUT', '/sandbox/dropped-execs', { keep_running: false });
      await sandbox.control('DELETE', '/sandbox/faults');
    }
  },
);

// The demo's account of two deploys at once (scripts/demo.sh, step 5) used to
// be a fixed sentence saying CI waited and read the ledger, whichever won.
test("the demo's account of a race says who took the lease and ran the statements, from the events", { timeout }, async () => {
  const { raceStory } = await import('../scripts/lib/race-story.mjs');
  const id = 'coord-race-story';
  const race = props({ statements: ['CREATE DATABASE IF NOT EXISTS coord_race', 'CREATE TABLE coord_race.t (id UInt64) ENGINE = MergeTree ORDER BY id'] });
  const events = { laptop: [], CI: [] };
  let ciHolds;
  const ciTook = new Promise((resolve) => (ciHolds = resolve));
  const said = (who) => (e) => {
    if (e.kind !== 'leaseTaken' && e.kind !== 'leaseWaiting') return;
    events[who].push({ ...e, at: performance.now() });
    if (who === 'CI' && e.kind === 'leaseTaken') ciHolds();
  };
  // CI wins, as it did on a fresh machine: the laptop starts once CI holds the lease.
  const ci = apply(id, race, undefined, { onEvent: said('CI') });
  await ciTook;
  const laptop = await apply(id, race, undefined, { onEvent: said('laptop') });
  const ciResult = await ci;
  await new Promise((resolve) => setImmediate(resolve));
  const lines = raceStory([
    { who: 'laptop', events: events.laptop, result: laptop },
    { who: 'CI', events: events.CI, result: ciResult },
  ]);
  const pods = sandbox.info.pods.join(', ');
  assert.equal(lines[0], `CI took the lease first, without waiting, then ran the statements on ${pods}`);
  assert.match(lines[1], new RegExp(`^laptop took the lease next, after waiting \\d+ ms while \\S+ held it, then read the ledger, found the schema on ${pods}, and ran nothing$`));
});

// The ledger's rows and their order (README, "Concurrent deploys, lost state and adoption").
// Each pod's ledger rows of `id`, in the order the ledger puts them (oldest first).
// The replica label of a pod: chi-sandbox-sandbox-<shard>-<replica>-0.
const replicaOf = (pod) => pod.split('-').at(-2);
const ledgerRows = (pod, id) =>
  sandbox
    .query(pod, `SELECT seq, event, fingerprint FROM ops.clickhouse_schema_ledger WHERE resource_id = '${id}' AND pod = '${pod}' ORDER BY seq FORMAT TSV`)
    .split('\n')
    .filter(Boolean)
    .map((line) => line.split('\t'));

test('an apply then a destroy, in the same server second or not: the destroy is the newest row, and a deploy with lost state runs the statements again', { timeout }, async () => {
  const id = 'coord-order';
  const order = props({
    statements: ['CREATE DATABASE IF NOT EXISTS coord_order', 'CREATE TABLE coord_order.t (id UInt64) ENGINE = MergeTree ORDER BY id'],
    onDelete: 'run',
    deleteStatements: ['DROP DATABASE IF EXISTS coord_order'],
  });
  const applied = await apply(id, order);
  await destroy(id, order, applied.state);
  for (const pod of sandbox.info.pods) {
    // Numbered in the order written, whatever the server's clock said (18.16 has whole seconds).
    assert.deepEqual(
      ledgerRows(pod, id).map(([seq, event]) => event),
      ['started', 'applied', 'destroying', 'destroyed'],
      pod,
    );
    const seqs = ledgerRows(pod, id).map(([seq]) => Number(seq));
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), pod);
    assert.equal(new Set(seqs).size, 4, `four distinct numbers on ${pod}: ${seqs}`);
  }
  const seen = await status(id, order);
  for (const p of seen.pods) {
    assert.equal(p.event, 'destroyed', p.pod);
    assert.equal(p.current, false, p.pod);
  }
  await sandbox.clearLogs();
  const again = await apply(id, order);
  assert.deepEqual(again.appliedTo, sandbox.info.pods, 'the statements ran again on every pod');
  for (const pod of sandbox.info.pods) assert.deepEqual(sandbox.tablesOn(pod, 'coord_order'), ['t'], pod);
});

test('an apply stopped between statements leaves its started row; a deploy with lost state runs the whole list there again', { timeout }, async () => {
  const id = 'coord-started';
  const first = ['CREATE DATABASE IF NOT EXISTS coord_started', 'CREATE TABLE IF NOT EXISTS coord_started.t (id UInt64) ENGINE = MergeTree ORDER BY id'];
  const v1 = props({ statements: first, parallelism: 1, lease: false });
  await apply(id, v1);
  // The next version drops the table, then is stopped before it declares anything in its place.
  // An exec per statement, so the exec log shows where the deploy is on either engine.
  const v2 = props({
    statements: [first[0], 'DROP TABLE IF EXISTS coord_started.t', 'SELECT sleep(3)', 'CREATE TABLE IF NOT EXISTS coord_started.t2 (id UInt64) ENGINE = Memory'],
    parallelism: 1,
    lease: false,
    execMode: 'perStatement',
  });
  await sandbox.clearLogs();
  const controller = new AbortController();
  const stopped = apply(id, v2, undefined, { signal: controller.signal }).then(
    () => 'resolved',
    (e) => e,
  );
  const pod = sandbox.info.pods[0];
  // The exec after the DROP on the first pod, running (its stdin may not be logged yet).
  const sleepingIn = (execs) => {
    const at = execs.findIndex((e) => e.pod === pod && e.stdin === 'DROP TABLE IF EXISTS coord_started.t');
    return at >= 0 ? execs.slice(at + 1).find((e) => e.pod === pod && e.outcome === 'running') : undefined;
  };
  let sleeping;
  for (let i = 0; i < 600 && !(sleeping = sleepingIn(await execLog())); i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.ok(sleeping, 'the sleep was seen running on the first pod');
  controller.abort();
  const outcome = await stopped;
  assert.equal(outcome.code, 'E_CANCELLED', String(outcome));
  assert.deepEqual(sandbox.tablesOn(pod, 'coord_started'), [], 'the table was dropped there');
  assert.deepEqual(ledgerRows(pod, id).at(-1).slice(1), ['started', fingerprint(v2, id)], 'its newest row says the change started');
  // Rolled back to the first version by a deploy that lost its state: that pod's newest row is
  // the stopped change's start, not the first version's apply, so the list runs there again.
  await sandbox.clearLogs();
  const back = await apply(id, v1);
  assert.ok(back.appliedTo.includes(pod), `the list ran again on ${pod}: ${back.appliedTo}`);
  const execs = await execLog();
  for (const statement of first) assert.equal(statementRuns(execs, statement).filter((e) => e.pod === pod).length, 1, statement);
  for (const p of sandbox.info.pods) assert.deepEqual(sandbox.tablesOn(p, 'coord_started'), ['t'], p);
  const seen = (await status(id, v1)).pods.find((p) => p.pod === pod);
  assert.equal(seen.event, 'applied');
  assert.equal(seen.current, true);
  // adopt does not take the stopped change as this resource's either.
  const adoptV2 = await adopt(id, v2);
  assert.notEqual(adoptV2.ownership, 'owned', adoptV2.reason);
});

test("a pod's rows are the rows naming it: another pod's rows in its ledger (a shared or inherited table) do not cover it", { timeout }, async () => {
  const id = 'coord-by-pod';
  const [pod0, pod1] = sandbox.info.pods;
  const statements = ['CREATE DATABASE IF NOT EXISTS coord_by_pod', 'CREATE TABLE IF NOT EXISTS coord_by_pod.t (id UInt64) ENGINE = MergeTree ORDER BY id'];
  // Applied on the first pod only (its replica label selects it).
  const one = props({ statements, target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox', 'clickhouse.altinity.com/replica': replicaOf(pod0) } } });
  const first = await apply(id, one);
  assert.deepEqual(first.appliedTo, [pod0]);
  // The second pod's ledger holds the first pod's rows, as a Replicated ledger table or a data
  // volume the first pod used before would.
  const rows = sandbox.query(pod0, `SELECT resource_id, fingerprint, statement_count, pod, pod_uid, applied_at, package_version, seq, event FROM ops.clickhouse_schema_ledger WHERE resource_id = '${id}' FORMAT TSV`);
  sandbox.query(pod1, 'CREATE DATABASE IF NOT EXISTS ops');
  sandbox.query(
    pod1,
    'CREATE TABLE IF NOT EXISTS ops.clickhouse_schema_ledger (resource_id String, fingerprint String, statement_count UInt32, ' +
      'pod String, pod_uid String, applied_at String, package_version String, seq UInt64, event String) ENGINE = MergeTree ORDER BY (pod, seq)',
  );
  const values = rows
    .split('\n')
    .map((line) => line.split('\t'))
    .map(([rid, fp, count, pod, uid, at, version, seq, event]) => `('${rid}', '${fp}', ${count}, '${pod}', '${uid}', '${at}', '${version}', ${seq}, '${event}')`);
  assert.equal(values.length, 2, 'the first pod has its started and applied rows');
  sandbox.query(pod1, `INSERT INTO ops.clickhouse_schema_ledger (resource_id, fingerprint, statement_count, pod, pod_uid, applied_at, package_version, seq, event) VALUES ${values.join(', ')}`);
  // Every pod, with the state lost: only the first pod is covered.
  await sandbox.clearLogs();
  const all = await apply(id, props({ statements }));
  assert.deepEqual(all.appliedTo, sandbox.info.pods.filter((p) => p !== pod0));
  for (const p of sandbox.info.pods) assert.deepEqual(sandbox.tablesOn(p, 'coord_by_pod'), ['t'], p);
});

test('a destroy that failed half way is retried on the pods it did not finish, and only those', { timeout }, async () => {
  const id = 'coord-destroy-retry';
  const [pod0, pod1, pod2] = sandbox.info.pods;
  const d = props({
    statements: ['CREATE DATABASE IF NOT EXISTS coord_dr', 'CREATE TABLE IF NOT EXISTS coord_dr.t (id UInt64) ENGINE = MergeTree ORDER BY id'],
    onDelete: 'run',
    // Not idempotent on purpose: run twice on a pod, it fails (the table is gone).
    deleteStatements: ['DROP TABLE coord_dr.t', 'DROP DATABASE IF EXISTS coord_dr'],
    parallelism: 1,
  });
  const { state } = await apply(id, d);
  // The last pod's table is gone already, so the destroy fails there, after the first two pods.
  sandbox.query(pod2, 'DROP TABLE coord_dr.t');
  const failed = await rejection(destroy(id, d, state));
  assert.equal(failed.pod, pod2, failed.message);
  assert.equal(failed.statementIndex, 0);
  sandbox.query(pod2, 'CREATE TABLE coord_dr.t (id UInt64) ENGINE = MergeTree ORDER BY id');
  // Retried with the same state: the first two pods are not touched again.
  await sandbox.clearLogs();
  await destroy(id, d, state);
  const execs = await execLog();
  assert.deepEqual([...new Set(statementRuns(execs, 'DROP TABLE coord_dr.t').map((e) => e.pod))], [pod2]);
  for (const p of [pod0, pod1, pod2]) {
    assert.deepEqual(sandbox.tablesOn(p, 'coord_dr'), [], p);
    // No row of the destroy looks like an apply.
    const events = ledgerRows(p, id).map(([, event]) => event);
    assert.equal(events.at(-1), 'destroyed', `${p}: ${events}`);
    assert.equal(events.filter((e) => e === 'applied').length, 1, `${p}: only the apply's own row: ${events}`);
  }
});

test1816('ON CLUSTER needs the distributed DDL queue', 'onCluster with a lost state runs the list again unless every pod\'s ledger holds it', { timeout }, async () => {
  const id = 'coord-on-cluster';
  const ledger = { database: 'ops', table: 'on_cluster_ledger' };
  const statements = [
    "CREATE DATABASE IF NOT EXISTS coord_oc ON CLUSTER 'sandbox'",
    "CREATE TABLE IF NOT EXISTS coord_oc.t ON CLUSTER 'sandbox' (id UInt64) ENGINE = MergeTree ORDER BY id",
  ];
  const oc = props({ statements, execution: { mode: 'onCluster', cluster: 'sandbox' }, ledger });
  const first = await apply(id, oc);
  assert.equal(first.appliedTo.length, 1, 'run once');
  // The list reached every host, so every pod's ledger says so.
  for (const pod of sandbox.info.pods) {
    assert.equal(sandbox.query(pod, `SELECT event FROM ops.on_cluster_ledger WHERE resource_id = '${id}' AND pod = '${pod}' ORDER BY seq DESC LIMIT 1`), 'applied', pod);
  }
  // All but one pod lose their ledger: one pod's row says nothing of the others.
  for (const pod of sandbox.info.pods.slice(1)) sandbox.query(pod, 'DROP TABLE ops.on_cluster_ledger');
  await sandbox.clearLogs();
  const again = await apply(id, oc);
  assert.equal(again.appliedTo.length, 1, 'the list ran again, once');
  const execs = await execLog();
  for (const statement of statements) assert.equal(statementRuns(execs, statement).length, 1, statement);
  // Now every pod's ledger holds it again, and a deploy with a lost state runs nothing.
  await sandbox.clearLogs();
  const third = await apply(id, oc);
  assert.deepEqual(third.appliedTo, []);
  const reads = await execLog();
  for (const statement of statements) assert.equal(statementRuns(reads, statement).length, 0, statement);
});
