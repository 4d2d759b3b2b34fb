// The demo's narrative: the quick-start stack (examples/quickstart/stack.ts)
// deployed with Alchemy against the sandbox, redeployed, scaled out, drifted
// and repaired, then two concurrent deploys of a leased schema and a lost
// state, and the teardown, with what reached the cluster at each step read
// from the sandbox's own request logs.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

import { batchStatements } from './lib/batch-script.mjs';
import { raceStory } from './lib/race-story.mjs';
import { openSandbox } from './lib/sandbox-client.mjs';

const { info, kubeconfig, control, query, tablesOn, clearLogs } = openSandbox(resolve(process.argv[2] ?? '.sandbox-demo'));

// The stack reads the sandbox's kubeconfig from SANDBOX_KUBECONFIG, and Alchemy
// keeps its state under the working directory it is first imported from: a
// fresh temp dir, so every run of the demo starts from an empty state.
process.env.SANDBOX_KUBECONFIG = kubeconfig;
const stateRoot = mkdtempSync(join(tmpdir(), 'alchemy-clickhouse-demo-'));
process.chdir(stateRoot);
const { deployStack, destroyStack, driftStack } = await import('../dist/examples/runtime.js');
const { apply, clickHouseSchemaProvider, plan } = await import('../dist/index.js');
const { stack } = await import('../dist/examples/quickstart/stack.js');

const bold = (s) => `\x1b[1m${s}\x1b[0m`;
const say = (s) => console.log(`\n${bold(s)}`);
const detail = (s) => console.log(`  ${s}`);
const tables = (pod) => tablesOn(pod, 'orders').join(', ') || '(none)';
const stateFile = join(stateRoot, '.alchemy/state/quickstart/dev/orders-schema.json');
const recorded = () => JSON.parse(readFileSync(stateFile, 'utf8'));

/** How long the last `measured` step took, in ms. */
let lastMs = 0;

/** Runs `step` with fresh request logs and says what it cost the cluster. */
async function measured(step) {
  await clearLogs();
  const started = Date.now();
  const result = await step();
  const ms = Date.now() - started;
  lastMs = ms;
  const api = await control('GET', '/sandbox/api-log');
  const execs = await control('GET', '/sandbox/exec-log');
  const lists = api.filter((r) => r.method === 'GET' && r.path.endsWith('/pods')).length;
  // The live-schema check's and the ledger's execs are recognisable by their scripts' first lines.
  const isCheck = (e) => e.stdin.startsWith('CREATE DATABASE _clickhouse_schema_verify_');
  // A pod's script starts with the ledger's opening row when it writes it: it is no ledger exec.
  const isLedger = (e) =>
    !batchStatements(e.stdin) && (e.stdin.startsWith('SELECT resource_id,') || e.stdin.startsWith('CREATE DATABASE IF NOT EXISTS `ops`;'));
  // A rebuild's scripts name its receipts table, its cut-over or the live partitions.
  const isRebuild = (e) =>
    /clickhouse_schema_rebuild_receipts|__rebuild_|__new`|^SELECT toUnixTimestamp|^SELECT partition_id|^SELECT toString\(toUInt64/.test(e.stdin);
  // Convergence's exec starts with its first marker.
  const isConverge = (e) => e.stdin.startsWith("SELECT 'clickhouse_schema_converge'");
  const statements = execs.filter((e) => !isCheck(e) && !isLedger(e) && !isRebuild(e) && !isConverge(e));
  // A pod's script (the default) carries its whole list; an exec of its own carries one statement.
  const carried = (e) => batchStatements(e.stdin)?.statements.length ?? 1;
  const perPod = {};
  for (const e of statements) perPod[e.pod] = (perPod[e.pod] ?? 0) + carried(e);
  const where = Object.entries(perPod).map(([pod, n]) => `${pod}: ${n}`).join(', ') || 'none';
  const sent = statements.reduce((n, e) => n + carried(e), 0);
  const ledger = execs.filter(isLedger).length;
  // A pod's script also carries its live-schema check after its statements, and the ledger's rows.
  const inScripts = statements.filter((e) => batchStatements(e.stdin)?.check).length;
  const rowsInScripts = statements.reduce((n, e) => {
    const b = batchStatements(e.stdin);
    return n + (b?.opening ? 1 : 0) + (b?.closing ? 1 : 0);
  }, 0);
  const checks = execs.filter(isCheck).length + inScripts;
  const checksSaid = inScripts ? `${checks} live-schema check(s) (${inScripts} in the statements' exec)` : `${checks} live-schema check(s)`;
  say(
    `   What reached the cluster (${ms} ms): ${lists} pod list(s), ${statements.length} statement exec(s) carrying ` +
      `${sent} statement(s) [${where}], ` +
      `${checksSaid}${ledger ? `, ${ledger} ledger read(s) and write(s)` : ''}` +
      `${rowsInScripts ? `, ${rowsInScripts} ledger row(s) written in the statements' exec` : ''}` +
      `${execs.some(isRebuild) ? `, ${execs.filter(isRebuild).length} rebuild script(s)` : ''}` +
      `${execs.some(isConverge) ? `, ${execs.filter(isConverge).length} convergence exec(s)` : ''}`,
  );
  return result;
}

console.log(
  `\nThe quick-start stack (examples/quickstart/stack.ts) declares one ClickHouseSchema,\n` +
    `'orders-schema': 2 statements for every ClickHouse pod labelled chi=sandbox.\n` +
    `Alchemy's log lines follow each step; its state is kept in ${stateRoot}.`,
);

say('1. Deploy the stack: Alchemy creates the schema, which runs both statements on every pod');
const outputs = await measured(() => deployStack(stack));
detail('(the pod lists: one to select the pods, one re-list to confirm no pod appeared meanwhile)');
say('   The stack outputs:');
console.log(JSON.stringify(outputs, null, 2).replace(/^/gm, '  '));
say('   The schema outputs Alchemy recorded in its state (no kubeconfig, no statement text):');
console.log(JSON.stringify(recorded().attr, null, 2).replace(/^/gm, '  '));
for (const pod of info.pods) detail(`${pod} has tables: ${tables(pod)}`);

say('2. Deploy again, nothing changed: the provider lists the pods once, sees the same ones, and Alchemy reports no change');
await measured(() => deployStack(stack));

say('3. Scale out: the sandbox adds a 4th ClickHouse server pod, with an empty disk');
const added = await control('POST', '/sandbox/pods', {});
detail(`${added.name} has tables: ${tables(added.name)}`);
say(
  '   Deploy again with the same stack: the props are unchanged, but the provider\'s pod list shows a pod\n' +
    '   the state does not cover, so it asks Alchemy for an update, and only the new pod gets the statements',
);
await measured(() => deployStack(stack));
detail('(the pod lists: one to notice the new pod, then the apply\'s own list and the re-list that confirms the set)');
detail(`${added.name} has tables: ${tables(added.name)}`);
detail(`the state now covers: ${recorded().attr.podNames.join(', ')}`);

say(
  '4. One exec per pod. On a real cluster the API server, the kubelet and the container runtime take 100 to 300 ms\n' +
    '   to set up each exec before clickhouse-client starts; the sandbox now adds 150 ms to every exec, as they would.\n' +
    "   A schema of 20 statements goes to the 4 pods twice: first with execMode: 'perStatement' (an exec per statement,\n" +
    '   and one more per pod for the live-schema check), then with the default: each pod gets its whole list and the\n' +
    '   check after it in one exec, and the progress events still come per statement',
);
await control('PUT', '/sandbox/exec-setup', { ms: 150 });
const twenty = (tag) => ({
  target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
  statements: [
    'CREATE DATABASE IF NOT EXISTS wide',
    ...Array.from({ length: 19 }, (_, i) => `CREATE TABLE IF NOT EXISTS wide.t${i} (id UInt64) ENGINE = MergeTree ORDER BY id /* ${tag} */`),
  ],
  kubeConfig: { kubeconfigPath: kubeconfig },
});
const each = await measured(() => apply('wide-schema', { ...twenty('one'), execMode: 'perStatement' }));
const eachMs = lastMs;
let shown = 0;
await measured(() =>
  apply('wide-schema', twenty('two'), each.state, {
    // A few of the per-statement events, as they arrive while the pods' scripts run.
    onEvent: (e) => e.kind === 'statementFinished' && e.pod === info.pods[0] && shown++ < 3 && detail(e.message),
  }),
);
detail(`an exec per statement: ${eachMs} ms; an exec per pod: ${lastMs} ms (${(eachMs / lastMs).toFixed(1)}x faster)`);
await control('PUT', '/sandbox/exec-setup', { ms: 0 });

say('5. Drift: someone drops orders.events by hand on one pod');
const victim = info.pods[1];
query(victim, 'DROP TABLE orders.events');
detail(`${victim} has tables: ${tables(victim)}`);
say(
  '   `alchemy drift` asks the provider to read the schema: it looks up the declared objects on every\n' +
    '   recorded pod (one exec each, no statement) and reports the resource as drifted',
);
const detected = await measured(() => driftStack('quickstart', 'dev', clickHouseSchemaProvider));
for (const r of Object.values(detected.resources)) detail(`${r.logicalId}: ${r.action}`);
say('   `alchemy drift --repair`: the statements run again on exactly the pod that lacks the table');
await measured(() => driftStack('quickstart', 'dev', clickHouseSchemaProvider, true));
detail(`${victim} has tables: ${tables(victim)}`);

say(
  '6. Two deploys at once, then a lost state. A second schema, \'audit-schema\', turns on `lease` and `ledger`;\n' +
    '   two deploys of it start at the same moment (a laptop and CI, say)',
);
const audit = {
  target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
  statements: ['CREATE DATABASE IF NOT EXISTS audit', 'CREATE TABLE audit.log (at DateTime, what String) ENGINE = MergeTree ORDER BY at'],
  kubeConfig: { kubeconfigPath: kubeconfig },
  lease: { ttlSeconds: 15 },
  ledger: { database: 'ops' },
};
// Which one wins is up to the race: the account below is told from what each reported.
const events = { laptop: [], CI: [] };
const said = (who) => (e) => {
  if (e.kind === 'leaseTaken' || e.kind === 'leaseWaiting') {
    events[who].push({ ...e, at: performance.now() });
    detail(`${who}: ${e.message}`);
  }
};
const [laptop, ci] = await measured(() =>
  Promise.all([apply('audit-schema', audit, undefined, { onEvent: said('laptop') }), apply('audit-schema', audit, undefined, { onEvent: said('CI') })]),
);
// The events arrive on the JS thread after the calls settle at the latest.
await new Promise((resolve) => setImmediate(resolve));
for (const line of raceStory([
  { who: 'laptop', events: events.laptop, result: laptop },
  { who: 'CI', events: events.CI, result: ci },
])) {
  detail(line);
}
detail('(CREATE TABLE without IF NOT EXISTS: running it twice on a pod would have failed the deploy)');
say('   The state of that deploy is lost. The next deploy, with no state, reads the ledger on each pod and runs nothing');
const recovered = await measured(() => apply('audit-schema', audit));
detail(`ran the statements on: ${recovered.appliedTo.join(', ') || 'no pod'}; recorded: ${recovered.state.podNames.join(', ')}`);
detail(`${info.pods[0]}'s ledger: ${query(info.pods[0], "SELECT resource_id, statement_count, pod FROM ops.clickhouse_schema_ledger FORMAT TSV").replace(/\n/g, '; ')}`);

say(
  "7. A change no ALTER can make. A third schema, 'metrics-schema', has a table with rows on every pod;\n" +
    '   its declaration now orders the rows by (host, at) instead of at',
);
const metrics = (order, extra = {}) => ({
  target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
  statements: [
    'CREATE DATABASE IF NOT EXISTS metrics',
    `CREATE TABLE IF NOT EXISTS metrics.samples (at DateTime, host String, value Float64) ENGINE = MergeTree PARTITION BY toYYYYMMDD(at) ORDER BY ${order}`,
  ],
  kubeConfig: { kubeconfigPath: kubeconfig },
  ...extra,
});
const m1 = await apply('metrics-schema', metrics('at'));
for (const pod of m1.appliedTo) {
  query(pod, "INSERT INTO metrics.samples SELECT toDateTime('2026-11-28 00:00:00') + number * 600, concat('host-', toString(number % 5)), number FROM system.numbers LIMIT 432");
}
const samples = (pod, table) => query(pod, `SELECT toYYYYMMDD(at) AS day, count() FROM metrics.${table} GROUP BY day ORDER BY day FORMAT TSV`).replace(/\t/g, ': ').replace(/\n/g, ', ');
detail(`every pod holds 432 rows over 3 days; ${info.pods[0]}: ${samples(info.pods[0], 'samples')}`);
say('   Without the rebuild prop the deploy fails, and the message says which prop would allow a rebuild');
try {
  await apply('metrics-schema', metrics('(host, at)'), m1.state);
} catch (err) {
  detail(`${err.code}: ...${err.message.slice(err.message.indexOf('no ALTER can change'), err.message.indexOf(' }') + 2)}`);
}
say(
  "   With rebuild: { 'metrics.samples': { cutoverColumn: 'at' } }: on each pod a new table, a view that copies every row\n" +
    '   written from a cut-over on, a copy of the older rows partition by partition with a receipt each, a verification, a swap',
);
const rebuildPlan = await plan('metrics-schema', metrics('(host, at)', { rebuild: { 'metrics.samples': { cutoverColumn: 'at' } } }), m1.state);
detail(
  `plan first, nothing changes: ${rebuildPlan.rebuild.map((r) => `${r.table} would be rebuilt (${r.differences.join(', ')} differs) on ${r.pods.length} pods${r.refused ? `, but refused: ${r.refused}` : ''}`).join('; ')}`,
);
const rebuilt = await measured(() =>
  apply('metrics-schema', metrics('(host, at)', { rebuild: { 'metrics.samples': { cutoverColumn: 'at', cutoverDelaySeconds: 2 } } }), m1.state, {
    onEvent: (e) => {
      if (e.kind === 'rebuild' && (e.step !== 'backfill' || e.pod === info.pods[0])) detail(e.message);
    },
  }),
);
detail(`(the backfill of the other pods went the same way; applied to ${rebuilt.appliedTo.length} pods)`);
for (const pod of rebuilt.appliedTo) {
  detail(`${pod}: ORDER BY ${query(pod, "SELECT sorting_key FROM system.tables WHERE database = 'metrics' AND name = 'samples'")}; rows per day ${samples(pod, 'samples')}; the old table, kept: ${samples(pod, 'samples__old')}`);
}

say(
  "8. A column added by declaration. 'metrics-schema' now declares a 'region' column the table lacks, between host\n" +
    "   and value, with converge: 'additive': no ALTER to write; the deploy adds the column on every pod, where the\n" +
    '   declaration puts it, and the rows already there read the declared default',
);
const withRegion = (extra = {}) => {
  const p = metrics('(host, at)', extra);
  p.statements[1] = p.statements[1].replace('host String,', "host String, region String DEFAULT 'eu',");
  return p;
};
const planned = await plan('metrics-schema', withRegion({ converge: 'additive' }), rebuilt.state);
detail(`plan first, nothing runs: ${planned.converge.map((p) => `${p.pod}: ${p.objects.map((o) => o.changes.join(', ')).join('; ')}`).join(' | ')}`);
const converged = await measured(() =>
  apply('metrics-schema', withRegion({ converge: 'additive' }), rebuilt.state, {
    onEvent: (e) => e.kind === 'converge' && detail(e.message),
  }),
);
for (const pod of converged.appliedTo) {
  detail(`${pod}: columns ${query(pod, "SELECT groupArray(name) FROM system.columns WHERE database = 'metrics' AND table = 'samples'")}; rows per region ${query(pod, 'SELECT region, count() FROM metrics.samples GROUP BY region FORMAT TSV').replace(/\t/g, ': ')}`);
}

say("9. Destroy the stack: onDelete is 'retain' (the default), so Alchemy drops the state and the cluster is not touched");
await measured(() => destroyStack(stack));
detail(`${info.pods[0]} still has tables: ${tables(info.pods[0])}`);

say('Done.');
