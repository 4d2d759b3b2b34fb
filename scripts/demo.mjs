// The demo's narrative: one schema's lifecycle against the sandbox, with what
// reached the cluster at each step read from the sandbox's own request logs.
import { resolve } from 'node:path';

import { apply, destroy } from '../dist/index.js';
import { openSandbox } from './lib/sandbox-client.mjs';

const { info, kubeconfig, control, tablesOn, clearLogs } = openSandbox(resolve(process.argv[2] ?? '.sandbox-demo'));

const bold = (s) => `\x1b[1m${s}\x1b[0m`;
const say = (s) => console.log(`\n${bold(s)}`);
const detail = (s) => console.log(`  ${s}`);
const tables = (pod) => tablesOn(pod, 'orders').join(', ') || '(none)';

/** Runs `step` with fresh request logs and says what it cost the cluster. */
async function measured(step) {
  await clearLogs();
  const result = await step();
  const api = await control('GET', '/sandbox/api-log');
  const execs = await control('GET', '/sandbox/exec-log');
  const lists = api.filter((r) => r.method === 'GET' && r.path.endsWith('/pods')).length;
  const perPod = {};
  for (const e of execs) perPod[e.pod] = (perPod[e.pod] ?? 0) + 1;
  const where = Object.entries(perPod).map(([pod, n]) => `${pod}: ${n}`).join(', ') || 'none';
  detail(`cluster calls: ${lists} pod list(s), ${execs.length} statement exec(s) [${where}]`);
  return result;
}

// The quick start, pointed at the sandbox.
const props = {
  target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
  statements: [
    'CREATE DATABASE IF NOT EXISTS orders',
    `CREATE TABLE IF NOT EXISTS orders.events (
       id UUID, at DateTime, payload String
     ) ENGINE = MergeTree ORDER BY at`,
  ],
  kubeConfig: { kubeconfigPath: kubeconfig },
};

console.log(
  `\nThe Alchemy provider is not in this release yet; this demo drives the same lifecycle\n` +
    `through the package's apply()/destroy(), which the provider will call.`,
);

say('1. Deploy the quick-start schema (2 statements) to every ClickHouse pod');
let started = Date.now();
const first = await measured(() => apply('orders-schema', props));
detail(`applied to ${first.appliedTo.join(', ')} in ${Date.now() - started} ms`);
say('   Outputs recorded in state:');
console.log(JSON.stringify(first.state, null, 2).replace(/^/gm, '  '));
for (const pod of info.pods) detail(`${pod} has tables: ${tables(pod)}`);

say('2. Deploy again with nothing changed: one pod list, no statement runs');
started = Date.now();
const second = await measured(() => apply('orders-schema', props, first.state));
detail(`changed: ${second.changed} (${Date.now() - started} ms)`);

say('3. Scale out: the sandbox adds a 4th ClickHouse pod, with an empty disk');
const added = await control('POST', '/sandbox/pods', {});
detail(`${added.name} has tables: ${tables(added.name)}`);
say('   Deploy again: only the new pod gets the statements');
const third = await measured(() => apply('orders-schema', props, second.state));
detail(`applied to ${third.appliedTo.join(', ')}`);
detail(`${added.name} has tables: ${tables(added.name)}`);
detail(`state now covers: ${third.state.podNames.join(', ')}`);

say("4. Tear down with onDelete 'retain' (the default): the data stays, the cluster is not touched");
await measured(() => destroy('orders-schema', props, third.state));
detail(`${info.pods[0]} still has tables: ${tables(info.pods[0])}`);

say('Done.');
