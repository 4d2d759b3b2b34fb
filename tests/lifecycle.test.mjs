// apply/destroy through the built package with an executor injected from
// JavaScript: a scripted cluster that records every call, so the tests see
// exactly what reached the "cluster" and what the error carries.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { addonTarget, apply, destroy, plan, verify } from '../dist/index.js';
import { assertsTheAddonBuild } from './binding.mjs';
import { rejection } from './lib/rejection.mjs';
import { batchStatements, runBatch } from './lib/batch.mjs';

assertsTheAddonBuild(addonTarget);

const S0 = 'CREATE DATABASE IF NOT EXISTS orders';
const S1 = "CREATE TABLE IF NOT EXISTS orders.events (id UUID, note String DEFAULT 'n/a') ENGINE = MergeTree ORDER BY id";

function props(extra = {}) {
  return {
    target: { namespace: 'example-observability', podSelector: { 'clickhouse.altinity.com/chi': 'orders' } },
    statements: [S0, S1],
    retry: { maxAttempts: 2, backoffMs: 0 },
    // These tests count every exec; the live-schema check's own are at the end
    // and in tests/live-schema.test.mjs.
    verify: 'off',
    ...extra,
  };
}

/** A scripted cluster of Ready pods; `onExec` may return a result or throw. */
function fakeCluster(names, onExec = () => undefined) {
  const calls = { lists: [], execs: [], scripts: 0 };
  const pods = names.map((name, i) => ({ name, uid: `uid-${i}`, ready: true, phase: 'Running', containers: ['clickhouse'] }));
  const executor = {
    listPods: async (namespace, selector) => {
      calls.lists.push({ namespace, selector });
      return pods.map((p) => ({ ...p }));
    },
    exec: async (request) => {
      // A pod's script (execMode 'perPod'): its statements are answered, and recorded, one by one.
      const batch = batchStatements(request.stdin);
      if (batch) {
        calls.scripts += 1;
        return runBatch(request, batch, onExec, (one) => calls.execs.push(one));
      }
      calls.execs.push(request);
      return (await onExec(request)) ?? { stdout: '', stderr: '', exitCode: 0 };
    },
  };
  return { executor, calls, pods };
}

test('apply runs every statement on every pod and returns the state to record', async () => {
  const { executor, calls } = fakeCluster(['chi-0', 'chi-1', 'chi-2']);
  const result = await apply('orders-schema', props(), undefined, { executor: executor });
  assert.equal(result.changed, true);
  assert.deepEqual(result.appliedTo, ['chi-0', 'chi-1', 'chi-2']);
  assert.equal(calls.lists.length, 2, 'selection and one re-list');
  assert.deepEqual(calls.lists[0], {
    namespace: 'example-observability',
    selector: { 'clickhouse.altinity.com/chi': 'orders' },
  });
  assert.equal(calls.execs.length, 6);
  for (const req of calls.execs) {
    assert.equal(req.container, 'clickhouse');
    assert.ok([S0, S1].includes(req.stdin));
    assert.ok(req.command.every((arg) => !arg.includes(req.stdin)), 'statement never in argv');
    assert.deepEqual(req.command.slice(0, 2), ['sh', '-c']);
    // The password is read in the pod into a config file on a pipe, never onto a command line.
    assert.match(req.command[2], /; p=\$\{CLICKHOUSE_PASSWORD:-\}; /);
    assert.match(req.command[2], /printf '%s' "\$p" \| sed /);
    assert.match(req.command[2], /clickhouse-client --config-file=\/dev\/fd\/4 --host=localhost --user='default' --database='default' --port=9000/);
    assert.doesNotMatch(req.command[2], /--password/);
  }
  const { state } = result;
  assert.match(state.fingerprint, /^[0-9a-f]{64}$/);
  assert.equal(state.stateVersion, 1);
  assert.equal(state.statementCount, 2);
  assert.equal(state.database, 'default');
  assert.deepEqual(state.podNames, ['chi-0', 'chi-1', 'chi-2']);
  assert.deepEqual(state.pods, [
    { name: 'chi-0', uid: 'uid-0' },
    { name: 'chi-1', uid: 'uid-1' },
    { name: 'chi-2', uid: 'uid-2' },
  ]);
  assert.equal(state.clusterId, undefined, 'an injected executor without kubeConfig names no cluster');
  assert.ok(!Number.isNaN(Date.parse(state.appliedAt)), state.appliedAt);
  assert.ok(!JSON.stringify(state).includes('CREATE'), 'no statement in state');
});

test('an unchanged converge lists once and runs nothing', async () => {
  const first = fakeCluster(['chi-0', 'chi-1']);
  const { state } = await apply('orders-schema', props(), undefined, { executor: first.executor });
  const again = fakeCluster(['chi-0', 'chi-1']);
  const result = await apply('orders-schema', props(), state, { executor: again.executor });
  assert.equal(result.changed, false);
  assert.deepEqual(result.state, state);
  assert.equal(again.calls.lists.length, 1);
  assert.equal(again.calls.execs.length, 0);
});

test('an SQL failure rejects with every ClickHouseSchemaError property and no secret', async () => {
  const secretStatement = "CREATE USER IF NOT EXISTS app IDENTIFIED BY 'Sup3r-Secret-Pw'";
  const { executor, calls } = fakeCluster(['chi-0', 'chi-1'], (req) => {
    if (req.pod === 'chi-1' && req.stdin === secretStatement) {
      return {
        stdout: '',
        stderr: "Code: 62. DB::Exception: Syntax error: failed at position 38: 'Sup3r-Secret-Pw'. Expected one of: ...\n",
        exitCode: 62,
      };
    }
  });
  const err = await rejection(apply('orders-schema', props({ statements: [S0, S1, secretStatement] }), undefined, { executor: executor }));
  assert.equal(err.code, 'E_STATEMENT_FAILED');
  assert.equal(err.resourceId, 'orders-schema');
  assert.equal(err.statementIndex, 2);
  assert.equal(err.pod, 'chi-1');
  assert.equal(err.clickHouseCode, 62);
  assert.equal(err.clickHouseException, 'DB::Exception');
  assert.equal(err.exitCode, 62);
  assert.match(err.message, /^ClickHouseSchema 'orders-schema': statement 2 failed on pod chi-1\nwith ClickHouse code 62 \(DB::Exception\) \(exit 62\)\.(\n|$)/);
  assert.ok(!err.message.includes('Sup3r-Secret-Pw'), err.message);
  assert.ok(!err.stack.includes('Sup3r-Secret-Pw'));
  const failing = calls.execs.filter((r) => r.pod === 'chi-1' && r.stdin === secretStatement);
  assert.equal(failing.length, 1, 'an SQL error is never retried');
});

// A stop of an attempt that ended without an outcome (KILL QUERY by its id, then a count of what
// still runs), answered as a server does when nothing of it runs any more.
const isStop = (request) => request.stdin.includes('KILL QUERY WHERE');
// What a stop prints in a pod whose processes it can read, when nothing of the exec is left.
const STOPPED = {
  stdout: 'clickhouse-schema-pod-ended\t0\nclickhouse-schema-pod-left\t0\nclickhouse-schema-still-running\t0\n',
  stderr: '',
  exitCode: 0,
};

test('a rejected exec is a transport failure: retried once its attempt is stopped, then reported', async () => {
  let failures = 1;
  const flaky = fakeCluster(['chi-0'], (request) => {
    if (isStop(request)) return STOPPED;
    if (failures-- > 0) throw new Error('websocket closed');
  });
  const ok = await apply('orders-schema', props(), undefined, { executor: flaky.executor });
  assert.equal(ok.changed, true);
  assert.deepEqual(
    flaky.calls.execs.map((r) => (isStop(r) ? 'stop' : r.stdin)),
    [S0, 'stop', 'stop', S0, S1],
    'one failed attempt, its stop (a second look 5 s after the attempt was sent: its client may not have registered its query at the first), then both statements',
  );

  const down = fakeCluster(['chi-0'], (request) => (isStop(request) ? STOPPED : Promise.reject(new Error('connection reset by peer'))));
  const err = await rejection(apply('orders-schema', props(), undefined, { executor: down.executor }));
  assert.equal(err.code, 'E_TRANSPORT');
  assert.equal(err.statementIndex, 0);
  assert.equal(err.pod, 'chi-0');
  assert.match(err.message, /after 2 attempt\(s\)/);
  assert.match(err.message, /connection reset by peer/);

  // An executor that cannot answer the stop: the attempt may still run, so it is not retried.
  const mute = fakeCluster(['chi-0'], (request) => (isStop(request) ? undefined : Promise.reject(new Error('websocket closed'))));
  const unconfirmed = await rejection(apply('orders-schema', props(), undefined, { executor: mute.executor }));
  assert.equal(unconfirmed.code, 'E_TRANSPORT');
  assert.equal(mute.calls.execs.filter((r) => !isStop(r)).length, 1, 'sent once');
  assert.match(unconfirmed.message, /It was not retried: that attempt could not be confirmed stopped/);
});

test('a listPods that throws synchronously is a failure, not a crash', async () => {
  const executor = {
    listPods: () => {
      throw new Error('no route to API server');
    },
    exec: async () => ({ stdout: '', stderr: '', exitCode: 0 }),
  };
  const err = await rejection(apply('orders-schema', props(), undefined, { executor: executor }));
  assert.equal(err.code, 'E_TRANSPORT');
  assert.match(err.message, /no route to API server/);
});

test('invalid props reject with the validation error before any call', async () => {
  const { executor, calls } = fakeCluster(['chi-0']);
  const err = await rejection(apply('orders-schema', { statements: [] }, undefined, { executor: executor }));
  assert.equal(err.code, 'E_INVALID_CONFIG');
  assert.ok(err.issues.length > 0);
  assert.equal(calls.lists.length + calls.execs.length, 0);
});

test('a pod set that never settles fails naming the uncovered pods', async () => {
  const { executor, pods } = fakeCluster(['chi-0']);
  let n = 1;
  const churning = {
    listPods: executor.listPods,
    exec: async (req) => {
      pods.push({ name: `chi-${n}`, uid: `uid-new-${n}`, ready: true, phase: 'Running', containers: ['clickhouse'] });
      n += 1;
      return executor.exec(req);
    },
  };
  const err = await rejection(apply('orders-schema', props({ maxReconcilePasses: 2 }), undefined, { executor: churning }));
  assert.equal(err.code, 'E_POD_SET_UNSTABLE');
  assert.match(err.message, /after 2 reconcile pass\(es\), \d+ pod\(s\) had still not been applied to \(chi-/);
});

test('destroy: retain never reaches the cluster, run executes deleteStatements, run without state refuses', async () => {
  const first = fakeCluster(['chi-0', 'chi-1']);
  const { state } = await apply('orders-schema', props(), undefined, { executor: first.executor });

  const retained = fakeCluster(['chi-0', 'chi-1']);
  await destroy('orders-schema', props(), state, { executor: retained.executor });
  assert.equal(retained.calls.lists.length + retained.calls.execs.length, 0);

  const runProps = props({ onDelete: 'run', deleteStatements: ['DROP DATABASE IF EXISTS orders'] });
  const run = fakeCluster(['chi-0', 'chi-1']);
  await destroy('orders-schema', runProps, state, { executor: run.executor });
  assert.deepEqual(
    run.calls.execs.map((r) => `${r.pod}: ${r.stdin}`),
    ['chi-0: DROP DATABASE IF EXISTS orders', 'chi-1: DROP DATABASE IF EXISTS orders'],
  );

  const never = fakeCluster(['chi-0']);
  const err = await rejection(destroy('orders-schema', runProps, undefined, { executor: never.executor }));
  assert.equal(err.code, 'E_NOTHING_APPLIED');
  assert.equal(never.calls.lists.length + never.calls.execs.length, 0);
});

test('a malformed previous state is reported, not silently ignored', async () => {
  const { executor, calls } = fakeCluster(['chi-0']);
  const err = await rejection(apply('orders-schema', props(), { fingerprint: 42 }, { executor: executor }));
  assert.equal(err.code, 'E_INVALID_STATE');
  assert.deepEqual(err.issues.map((i) => i.path), ['previousState']);
  assert.match(err.message, /previousState: is not a ClickHouseSchema state/);
  assert.equal(calls.execs.length, 0);
});

test('an exit code that is not an exit status is never read as success, nor retried', async () => {
  for (const exitCode of [Number.NaN, 0.5, 2 ** 32, -1, 256, Number.POSITIVE_INFINITY]) {
    const { executor, calls } = fakeCluster(['chi-0'], () => ({ stdout: '', stderr: '', exitCode }));
    const err = await rejection(apply('orders-schema', props(), undefined, { executor: executor }));
    assert.equal(err.code, 'E_TRANSPORT', `exitCode ${exitCode}`);
    assert.equal(err.statementIndex, 0);
    assert.match(err.message, /not an exit status \(an integer from 0 to 255\)/);
    assert.match(err.message, /not retried/);
    assert.equal(calls.execs.length, 1, `exitCode ${exitCode}: one attempt`);
  }
});

test('a rejection without an Error still says what happened', async () => {
  for (const [reason, phrase] of [
    [undefined, /rejected with undefined and gave no reason/],
    [null, /rejected with null and gave no reason/],
    [{ status: 'bad', stdin: S1 }, /rejected with a plain object \(keys: status, stdin\), not an Error/],
    [Symbol('why'), /rejected with a Symbol \(why\), not an Error/],
    [42, /failed: 42/],
    [new Error('socket hang up'), /socket hang up/],
  ]) {
    const { executor } = fakeCluster(['chi-0'], (request) => (isStop(request) ? STOPPED : Promise.reject(reason)));
    const err = await rejection(apply('orders-schema', props(), undefined, { executor: executor }));
    assert.equal(err.code, 'E_TRANSPORT');
    assert.match(err.message, phrase);
    assert.match(err.message, /after 2 attempt\(s\)/, 'a rejection is a transport failure, retried');
  }
});

test('props holding NaN, Infinity or functions are E_INVALID_CONFIG naming each path', async () => {
  const bad = props({
    statementTimeoutMs: Number.NaN,
    settings: { max_threads: Number.POSITIVE_INFINITY },
    executor: { listPods: () => [], exec: () => ({}) },
  });
  const { executor, calls } = fakeCluster(['chi-0']);
  const err = await rejection(apply('orders-schema', bad, undefined, { executor: executor }));
  assert.equal(err.code, 'E_INVALID_CONFIG');
  assert.equal(err.resourceId, 'orders-schema');
  assert.deepEqual(err.issues.map((i) => i.path).sort(), [
    'executor.exec',
    'executor.listPods',
    'settings.max_threads',
    'statementTimeoutMs',
  ]);
  assert.match(err.message, /statementTimeoutMs: is NaN/);
  assert.match(err.message, /settings\.max_threads: is Infinity/);
  assert.match(err.message, /executor\.exec: is part of an executor, which is not a prop: pass it in the options argument/);
  assert.equal(calls.lists.length + calls.execs.length, 0);
});

test('plan answers whether apply would run anything, at the cost of its no-op check', async () => {
  const first = fakeCluster(['chi-0', 'chi-1']);
  const { state } = await apply('orders-schema', props(), undefined, { executor: first.executor });

  const same = fakeCluster(['chi-0', 'chi-1']);
  assert.deepEqual(await plan('orders-schema', props(), state, { executor: same.executor }), {
    changed: false,
    everyPod: false,
    pods: [],
    statements: [],
    converge: [],
    rebuild: [],
  });
  assert.equal(same.calls.lists.length, 1);
  assert.equal(same.calls.execs.length, 0);

  const grown = fakeCluster(['chi-0', 'chi-1', 'chi-2']);
  const result = await plan('orders-schema', props(), state, { executor: grown.executor });
  assert.equal(result.changed, true);
  assert.equal(result.reason, 'the pod set changed (added: chi-2)');
  assert.equal(result.why, 'podSetChanged');
  assert.deepEqual(result.pods, [{ pod: 'chi-2', why: 'newPod' }]);
  assert.deepEqual(result.statements, [
    { index: 0, verb: 'CREATE DATABASE IF NOT EXISTS', object: 'orders' },
    { index: 1, verb: 'CREATE TABLE IF NOT EXISTS', object: 'orders.events' },
  ]);
  assert.equal(grown.calls.execs.length, 0, 'a plan never runs a statement');

  const none = fakeCluster(['chi-0']);
  const fresh = await plan('orders-schema', props(), undefined, { executor: none.executor });
  assert.deepEqual(
    { changed: fresh.changed, reason: fresh.reason, why: fresh.why, everyPod: fresh.everyPod, pods: fresh.pods },
    { changed: true, reason: 'nothing has been applied yet', why: 'firstApply', everyPod: true, pods: [] },
  );
  assert.equal(fresh.statements.length, 2);
  // Without a rebuild prop the plan looks at no table.
  assert.deepEqual(fresh.rebuild, []);
  assert.equal(none.calls.execs.length, 0);
});

test('an AbortSignal cancels an apply: the exec in flight is abandoned, nothing runs after, nothing is recorded', async () => {
  let started = 0;
  // The second statement never answers, as a stalled exec would not.
  const { executor, calls } = fakeCluster(['chi-0', 'chi-1'], () => {
    started += 1;
    return started === 2 ? new Promise(() => {}) : undefined;
  });
  const controller = new AbortController();
  // One pod at a time, so "the second statement" is chi-0's; one exec per statement, so it is an
  // exec of its own (a pod's script is below).
  const pending = apply('orders-schema', props({ parallelism: 1, execMode: 'perStatement' }), undefined, {
    executor,
    signal: controller.signal,
  });
  while (started < 2) await new Promise((r) => setTimeout(r, 5));
  const abortedAt = Date.now();
  controller.abort();
  const err = await rejection(pending);
  // The statement timeout is 300 s: a bound far under it, so a busy machine cannot fail it.
  assert.ok(Date.now() - abortedAt < 30_000, 'settles promptly, not at statementTimeoutMs');
  assert.equal(err.code, 'E_CANCELLED');
  assert.equal(err._tag, 'ClickHouseSchemaError');
  assert.equal(err.statementIndex, 1);
  assert.equal(err.pod, 'chi-0');
  assert.match(err.message, /cancelled while statement 1 was running on pod chi-0/);
  assert.match(err.message, /Nothing is recorded/);
  // The closed exec's statement may still run in the pod: one more exec stops it by its query id.
  const [statements, stops] = [calls.execs.slice(0, 2), calls.execs.slice(2)];
  assert.equal(stops.length, 1, 'no statement started after the abort, one stop');
  const queryId = /--query_id='([^']+)'/.exec(statements[1].command[2])[1];
  assert.match(stops[0].stdin, new RegExp(`KILL QUERY WHERE query_id IN \\('${queryId}'\\) SYNC FORMAT Null;`));
  assert.equal(stops[0].pod, 'chi-0');
  // This executor answers the stop with nothing, so it is not confirmed, and the error says so.
  assert.match(err.message, new RegExp(`statement 1 on pod chi-0 \\(query id ${queryId}\\) could not be confirmed stopped`));
});

test("an AbortSignal cancels a pod's script: its exec is abandoned and stopped by the script's query id", async () => {
  let started = 0;
  const { executor, calls } = fakeCluster(['chi-0', 'chi-1'], () => {
    started += 1;
    return started === 2 ? new Promise(() => {}) : undefined;
  });
  const controller = new AbortController();
  const pending = apply('orders-schema', props({ parallelism: 1 }), undefined, { executor, signal: controller.signal });
  while (started < 2) await new Promise((r) => setTimeout(r, 5));
  controller.abort();
  const err = await rejection(pending);
  assert.equal(err.code, 'E_CANCELLED');
  assert.equal(err.pod, 'chi-0');
  // This executor hands stdout over only at the end, so no statement was seen starting.
  assert.match(err.message, /cancelled while pod chi-0 ran statements 0 to 1 as one script; its exec was closed, and which of them ran is unknown/);
  const stops = calls.execs.filter(isStop);
  assert.equal(stops.length, 1, 'one stop, nothing started after the abort');
  assert.equal(calls.scripts, 1);
  const queryId = /--query_id='([^']+)'/.exec(calls.execs[0].command[2])[1];
  assert.match(stops[0].stdin, new RegExp(`KILL QUERY WHERE query_id IN \\('${queryId}'\\) SYNC FORMAT Null;`));
  assert.match(err.message, new RegExp(`statements 0 to 1 \\(one script\\) on pod chi-0 \\(query id ${queryId}\\) could not be confirmed stopped`));
});

test('an already aborted signal makes no call at all', async () => {
  const { executor, calls } = fakeCluster(['chi-0']);
  const err = await rejection(apply('orders-schema', props(), undefined, { executor, signal: AbortSignal.abort() }));
  assert.equal(err.code, 'E_CANCELLED');
  assert.equal(calls.lists.length + calls.execs.length, 0);
});

test('options without a signal or executor, and onEvent, are accepted', async () => {
  const { executor } = fakeCluster(['chi-0']);
  const result = await apply('orders-schema', props(), undefined, { executor, onEvent: () => {} });
  assert.equal(result.changed, true);
});

test('a state written by another release (another stateVersion) is refused before any call', async () => {
  const first = fakeCluster(['chi-0']);
  const { state } = await apply('orders-schema', props(), undefined, { executor: first.executor });
  const { executor, calls } = fakeCluster(['chi-0']);
  const err = await rejection(apply('orders-schema', props(), { ...state, stateVersion: 2 }, { executor }));
  assert.equal(err.code, 'E_INVALID_STATE');
  assert.match(err.message, /previousState: has stateVersion 2, and this release reads version 1/);
  assert.equal(calls.lists.length + calls.execs.length, 0);
});

// The cluster identity and credential handling of the Kubernetes side, in
// whichever build runs: the native one resolves kubeconfigs with kube-rs, the
// WebAssembly one with the package's JavaScript transport. Both must record
// the same clusterId for the same kubeconfig (a deploy that switches builds
// must not re-apply), so both are held to the documented encoding.
import { mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';

/** sha256 of `name|server|caData|caFile|skipTLSVerify` (crates/core/src/kubernetes/cluster_id.rs). */
const clusterIdOf = (name, server, caData, caFile, skip) =>
  createHash('sha256').update(`${name}|${server}|${caData ?? ''}|${caFile ?? ''}|${skip}`).digest('hex');

function kubeconfigDir(text) {
  const dir = mkdtempSync(join(tmpdir(), 'chs-kubeconfig-'));
  writeFileSync(join(dir, 'config'), text);
  return dir;
}

const KUBECONFIG_YAML = `apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443/
    certificate-authority-data: Q0EK
- name: staging
  cluster:
    server: https://staging.example:6443
    certificate-authority: ./ca/staging.pem
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: s3cr3t-token-value
contexts:
- name: prod
  context: {cluster: prod, user: admin}
- name: staging
  context: {cluster: staging, user: admin}
current-context: prod
`;

test('an injected executor with a kubeConfig prop records the documented clusterId of the kubeconfig', async () => {
  const dir = kubeconfigDir(KUBECONFIG_YAML);
  try {
    const path = join(dir, 'config');
    const { executor } = fakeCluster(['chi-0']);
    const prod = await apply('orders-schema', props({ kubeConfig: { kubeconfigPath: path } }), undefined, { executor });
    // The server exactly as written (trailing slash kept), the CA data as written.
    assert.equal(prod.state.clusterId, clusterIdOf('prod', 'https://prod.example:6443/', 'Q0EK', undefined, false));
    const staging = await apply(
      'orders-schema',
      props({ kubeConfig: { kubeconfigPath: path, context: 'staging', server: 'https://10.0.0.1:443' } }),
      undefined,
      { executor },
    );
    // A relative CA path is joined to the kubeconfig's directory as written; the server override counts.
    assert.equal(staging.state.clusterId, clusterIdOf('staging', 'https://10.0.0.1:443', undefined, `${dir}/./ca/staging.pem`, true));
    const inline = await apply(
      'orders-schema',
      props({ kubeConfig: { cluster: { name: 'edge', server: 'https://edge:6443', caFile: '/etc/edge-ca.pem' }, user: { name: 'deployer' } } }),
      undefined,
      { executor },
    );
    assert.equal(inline.state.clusterId, clusterIdOf('edge', 'https://edge:6443', undefined, '/etc/edge-ca.pem', false));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('options.connection: the identity is server, CA and TLS switch; it is called per call, and its failures and misuse are errors', async () => {
  const { executor, calls } = fakeCluster(['chi-0']);
  const ALCHEMY = { kubeConfig: { connection: { auth: { kind: 'aws-eks', clusterName: 'prod' } }, arn: 'arn:aws:eks:x' } };
  let minted = 0;
  const connection = async () => {
    minted += 1;
    return { endpoint: 'https://eks.example:443', certificateAuthorityData: 'Q0EK', token: `token-${minted}` };
  };
  const first = await apply('orders-schema', props(ALCHEMY), undefined, { executor, connection });
  assert.equal(first.state.clusterId, clusterIdOf('', 'https://eks.example:443', 'Q0EK', undefined, false));
  assert.equal(minted, 1);
  // Another token, the same cluster: nothing to do.
  const again = await apply('orders-schema', props(ALCHEMY), first.state, { executor, connection });
  assert.equal(again.changed, false);
  assert.equal(minted, 2);
  assert.equal(calls.execs.length, 2, 'only the first apply ran the statements');
  // Without a kubeConfig prop, a caller's own connection is used alike.
  const plain = await apply('orders-schema', props(), undefined, { executor, connection });
  assert.equal(plain.state.clusterId, first.state.clusterId);
  // A destroy that retains never asks for a token.
  await destroy('orders-schema', props(ALCHEMY), first.state, { executor, connection });
  assert.equal(minted, 3);

  // An Alchemy connection nobody resolves.
  let err = await rejection(apply('orders-schema', props(ALCHEMY), undefined, { executor }));
  assert.equal(err.code, 'E_INVALID_CONFIG');
  assert.equal(err.issues[0].path, 'kubeConfig');
  assert.match(err.message, /auth kind 'aws-eks'/);
  assert.match(err.message, /options\.connection/);
  // Kubeconfig options and a connection at once.
  err = await rejection(apply('orders-schema', props({ kubeConfig: { context: 'prod' } }), undefined, { executor, connection }));
  assert.equal(err.code, 'E_INVALID_CONFIG');
  assert.match(err.message, /pass one of the two/);
  // The resolver fails, or gives no endpoint: E_KUBERNETES_API, and a token it quotes is not repeated.
  const failing = async () => {
    throw new Error('exec plugin failed: Authorization: Bearer abcdef0123456789abcdef');
  };
  err = await rejection(apply('orders-schema', props(ALCHEMY), undefined, { executor, connection: failing }));
  assert.equal(err.code, 'E_KUBERNETES_API');
  assert.match(err.message, /could not be resolved/);
  assert.ok(!err.message.includes('abcdef0123456789abcdef'), err.message);
  err = await rejection(apply('orders-schema', props(ALCHEMY), undefined, { executor, connection: async () => ({ endpoint: ' ' }) }));
  assert.equal(err.code, 'E_KUBERNETES_API');
  assert.match(err.message, /gave no endpoint/);
  assert.equal(calls.execs.length, 4, 'no failed call ran anything');
});

test('the lease needs the Kubernetes API: with an injected executor it is refused before anything runs', async () => {
  const { executor, calls } = fakeCluster(['chi-0']);
  const err = await rejection(apply('orders-schema', props({ lease: true }), undefined, { executor }));
  assert.equal(err.code, 'E_KUBERNETES_API');
  assert.match(err.message, /the lease clickhouse-schema-orders-schema-[0-9a-f]{8} could not be read/);
  assert.match(err.message, /no Lease API/);
  assert.equal(calls.execs.length, 0);
});

test('KUBECONFIG files merge with the first one winning, as kubectl and kube-rs merge them', async () => {
  const first = kubeconfigDir(KUBECONFIG_YAML.replace('current-context: prod', 'current-context: staging'));
  const second = kubeconfigDir(
    KUBECONFIG_YAML.replace('https://prod.example:6443/', 'https://other.example').replace('current-context: prod', 'current-context: prod'),
  );
  const saved = process.env.KUBECONFIG;
  try {
    process.env.KUBECONFIG = `${join(first, 'config')}:${join(second, 'config')}`;
    const { executor } = fakeCluster(['chi-0']);
    // Without a kubeConfig prop, an injected executor names no cluster ...
    const none = await apply('orders-schema', props(), undefined, { executor });
    assert.equal(none.state.clusterId, undefined);
    // ... with one, the merged KUBECONFIG decides: the first file's current-context and clusters.
    const merged = await apply('orders-schema', props({ kubeConfig: { context: 'prod' } }), undefined, { executor });
    assert.equal(merged.state.clusterId, clusterIdOf('prod', 'https://prod.example:6443/', 'Q0EK', undefined, false));
  } finally {
    if (saved === undefined) delete process.env.KUBECONFIG;
    else process.env.KUBECONFIG = saved;
    rmSync(first, { recursive: true, force: true });
    rmSync(second, { recursive: true, force: true });
  }
});

test('no credential of the kubeconfig reaches an error: a failing exec plugin, a token over plain http', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'chs-credentials-'));
  const keyPem = '-----BEGIN PRIVATE KEY-----\nQ0xJRU5ULUtFWS1TRUNSRVQ=\n-----END PRIVATE KEY-----\n';
  const secrets = ['PLUGIN-ENV-SECRET', 'PLUGIN-STDERR-SECRET', 'PLUGIN-ARG-SECRET', 's3cr3t-token-value', 'Q0xJRU5ULUtFWS1TRUNSRVQ'];
  const keyData = Buffer.from(keyPem).toString('base64');
  try {
    const plugin = join(dir, 'get-token');
    writeFileSync(plugin, '#!/bin/sh\necho "failed, env was $VAULT_TOKEN, token: PLUGIN-STDERR-SECRET" >&2\nexit 1\n');
    chmodSync(plugin, 0o755);
    const withPlugin = KUBECONFIG_YAML.replace(
      '    token: s3cr3t-token-value\n',
      `    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: ${plugin}\n      args: ["--secret=PLUGIN-ARG-SECRET"]\n      env: [{name: VAULT_TOKEN, value: PLUGIN-ENV-SECRET}]\n`,
    ).replace('https://prod.example:6443/', 'https://127.0.0.1:9/');
    writeFileSync(join(dir, 'plugin'), withPlugin);
    writeFileSync(join(dir, 'http'), KUBECONFIG_YAML.replace('https://prod.example:6443/', 'http://127.0.0.1:9'));
    writeFileSync(
      join(dir, 'key'),
      KUBECONFIG_YAML.replace(
        '    token: s3cr3t-token-value\n',
        `    client-certificate-data: ${Buffer.from('not a certificate').toString('base64')}\n    client-key-data: ${keyData}\n`,
      ).replace('https://prod.example:6443/', 'https://127.0.0.1:9/'),
    );
    for (const [file, code, words] of [
      ['plugin', /^E_(KUBERNETES_API|TRANSPORT)$/, /authenticat|credential/],
      ['http', /^E_KUBERNETES_API$/, /credentials are never sent over plain HTTP/],
      ['key', /^E_(KUBERNETES_API|TRANSPORT)$/, /./],
    ]) {
      const err = await rejection(
        apply('orders-schema', props({ kubeConfig: { kubeconfigPath: join(dir, file) }, retry: { maxAttempts: 1, backoffMs: 0 } })),
      );
      assert.match(err.code, code, `${file}: ${err.message}`);
      assert.match(err.message, words, `${file}: ${err.message}`);
      const everything = `${err.message}\n${err.stack}\n${JSON.stringify(err)}`;
      for (const secret of [...secrets, keyData]) assert.ok(!everything.includes(secret), `${file}: ${secret} leaked:\n${everything}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a signal reused across calls does not collect a listener per call', async () => {
  const { getEventListeners } = await import('node:events');
  const controller = new AbortController();
  const run = async () => {
    const { executor } = fakeCluster(['chi-0']);
    await apply('orders-schema', props(), undefined, { executor, signal: controller.signal });
  };
  await run();
  const after1 = getEventListeners(controller.signal, 'abort').length;
  for (let i = 0; i < 5; i++) await run();
  assert.equal(getEventListeners(controller.signal, 'abort').length, after1);
});

test('the live-schema check runs after the statements, through the same executor, and fails or warns when it cannot run', async () => {
  // The fake answers every exec with empty output, so the check cannot read the catalogue.
  const { executor, calls } = fakeCluster(['chi-0']);
  const err = await rejection(apply('orders-schema', props({ verify: 'fail' }), undefined, { executor }));
  assert.equal(err.code, 'E_VERIFICATION_FAILED');
  assert.equal(err.pod, 'chi-0');
  assert.match(err.message, /the live-schema check could not run there: clickhouse-client stopped before the end of the check/);
  assert.match(err.message, /Nothing is recorded/);
  // Two statements, then the check in the same exec: a script for clickhouse-client --multiquery,
  // recognisable by its first line, holding scratch copies of the declared table and never the
  // statement as written. What it printed there could not be read, so it ran once more in an exec
  // of its own, which decided.
  assert.equal(calls.execs.length, 4);
  const [inBatch, own] = calls.execs.slice(2);
  for (const check of [inBatch, own]) {
    assert.match(check.stdin, /^CREATE DATABASE _clickhouse_schema_verify_[0-9a-f]{16};\n/);
    assert.match(check.command[2], /--multiquery --ignore-error/);
    assert.ok(!check.stdin.includes(S1), 'a scratch copy, not the statement');
  }
  assert.equal(inBatch.command[2], calls.execs[0].command[2], 'the statements\' exec');
  assert.match(inBatch.command[2], /clickhouse-schema-statements-ended/);
  assert.doesNotMatch(own.command[2], /clickhouse-schema-statements-ended/);

  const events = [];
  const warned = await apply('orders-schema', props({ verify: 'warn' }), undefined, { executor, onEvent: (e) => events.push(e) });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(warned.changed, true);
  assert.deepEqual(
    events.filter((e) => e.kind === 'verificationFailed').map((e) => [e.kind, e.pod]),
    [['verificationFailed', 'chi-0']],
  );
});

test('verify needs a recorded apply', async () => {
  const { executor, calls } = fakeCluster(['chi-0']);
  const err = await rejection(verify('orders-schema', props({ verify: 'fail' }), undefined, { executor }));
  assert.equal(err.code, 'E_NOTHING_APPLIED');
  assert.equal(calls.lists.length + calls.execs.length, 0);
});

// Options are checked before anything else: a misspelt `executor` used to be
// ignored, and the call went to the ambient kubeconfig's cluster instead.
import { createServer } from 'node:http';
import { adopt, status } from '../dist/index.js';

test('an unknown option or one of the wrong type fails every call before any call, naming it', async () => {
  // The ambient kubeconfig points at a server that counts what reaches it.
  let reached = 0;
  const server = createServer((req, res) => {
    reached += 1;
    res.writeHead(500).end();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const dir = kubeconfigDir(`apiVersion: v1
kind: Config
clusters: [{name: ambient, cluster: {server: 'http://127.0.0.1:${server.address().port}'}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ambient, context: {cluster: ambient, user: u}}]
current-context: ambient
`);
  const saved = process.env.KUBECONFIG;
  process.env.KUBECONFIG = join(dir, 'config');
  try {
    const { executor, calls } = fakeCluster(['chi-0']);
    const { state } = await apply('orders-schema', props(), undefined, { executor });
    const withLedger = props({ ledger: { database: 'ops' }, onDelete: 'run', deleteStatements: ['DROP DATABASE IF EXISTS orders'] });
    const typo = { exectuor: executor };
    const calling = {
      apply: (o) => apply('orders-schema', withLedger, undefined, o),
      plan: (o) => plan('orders-schema', withLedger, state, o),
      verify: (o) => verify('orders-schema', withLedger, state, o),
      destroy: (o) => destroy('orders-schema', withLedger, state, o),
      status: (o) => status('orders-schema', withLedger, o),
      adopt: (o) => adopt('orders-schema', withLedger, o),
    };
    const before = calls.lists.length + calls.execs.length;
    for (const [name, call] of Object.entries(calling)) {
      let err = await rejection(call(typo));
      assert.equal(err.code, 'E_INVALID_CONFIG', name);
      assert.deepEqual(err.issues.map((i) => i.path), ['options.exectuor'], name);
      assert.match(err.message, /options\.exectuor: is not an option \(did you mean executor\?\)/, name);
      err = await rejection(call({ executor: 'kubectl', onEvent: 5, signal: {}, timers: { sleep: 1 } }));
      assert.equal(err.code, 'E_INVALID_CONFIG', name);
      assert.deepEqual(
        err.issues.map((i) => [i.path, i.reason]),
        [
          ['options.executor', 'must be an object with the functions listPods and exec, not a string'],
          ['options.onEvent', 'must be a function taking an event, not a number'],
          ['options.signal', 'must be an AbortSignal, not an object without them'],
          ['options.timers', 'must be an object with the function sleep, not an object without them'],
        ],
        name,
      );
      // An executor missing one of its functions is not an executor.
      err = await rejection(call({ executor: { listPods: executor.listPods } }));
      assert.deepEqual(err.issues.map((i) => i.path), ['options.executor'], name);
    }
    assert.equal(reached, 0, 'the ambient cluster was never reached');
    assert.equal(calls.lists.length + calls.execs.length, before, 'nor the executor');
    // Given as undefined or null, an option is absent, as before.
    const ok = await apply('orders-schema', props(), state, { executor, onEvent: undefined, signal: null });
    assert.equal(ok.changed, false);
  } finally {
    if (saved === undefined) delete process.env.KUBECONFIG;
    else process.env.KUBECONFIG = saved;
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

// The JavaScript Kubernetes transport (the WebAssembly build's) reads an API
// answer whole; a huge or hostile one must not grow memory without bound.
test('the JavaScript transport stops reading an API answer past its cap and says why', async () => {
  const { kubernetesApi } = await import('../dist/kubernetes.js');
  let sent = 0;
  let closed;
  const closedEarly = new Promise((resolve) => (closed = resolve));
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const chunk = Buffer.alloc(1024 * 1024, 'x');
    // 200 MiB unless the client hangs up first.
    const more = () => {
      while (sent < 200 * 1024 * 1024) {
        sent += chunk.length;
        if (!res.write(chunk)) return res.once('drain', more);
      }
      res.end();
    };
    res.on('close', () => closed(sent));
    more();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { api, dispose } = kubernetesApi();
  try {
    await api.resolve({ cluster: { name: 'huge', server: `http://127.0.0.1:${server.address().port}` }, user: { name: 'u' } });
    await api.connect(null);
    const out = await api.listPods('ns', 'app=ch');
    assert.equal(out.pods, undefined);
    assert.match(out.failure.message, /answer to GET \/api\/v1\/namespaces\/ns\/pods is larger than 32 MiB, so it was not read/);
    const at = await closedEarly;
    assert.ok(at < 200 * 1024 * 1024, `the connection was closed after ${at} bytes, not read to the end`);
  } finally {
    dispose();
    server.close();
  }
});
