/**
 * The spec's full example, on the sandbox: an upstream resource, a schema
 * ordered after it through `readyBarrier`, a fanout schema with a table, a
 * materialized view and `settings`, and `onDelete: 'run'` with the delete
 * statements that tear it down.
 *
 * The upstream here is Alchemy's built-in `Random` (a stand-in for the
 * ClickHouse instance a real stack deploys first): `readyBarrier` is an Output
 * derived from it, which is the dependency edge. Only the resolved `true` is
 * persisted in the schema's state.
 *
 * Deploy: `node examples/run.mjs full deploy`; tear down (runs the delete
 * statements on every pod): `node examples/run.mjs full destroy`.
 */
import * as Alchemy from 'alchemy';
import * as Output from 'alchemy/Output';
import * as Effect from 'effect/Effect';
import * as Layer from 'effect/Layer';
import { clickHouseSchema, clickHouseSchemaProvider } from 'alchemy-clickhouse-schema';

const kubeconfigPath = process.env.SANDBOX_KUBECONFIG;

export const stack = Alchemy.Stack(
  'full',
  {
    providers: Layer.mergeAll(clickHouseSchemaProvider, Alchemy.RandomProvider()),
    state: Alchemy.localState(),
  },
  Effect.gen(function* () {
    // 1. The upstream resource, deployed first.
    const upstream = yield* Alchemy.Random('instance-token', { bytes: 8 });

    // 2. The schema, ordered after it by readyBarrier.
    const schema = yield* clickHouseSchema('analytics-schema', {
      readyBarrier: Output.map(Output.of(upstream), () => true),
      target: {
        namespace: 'sandbox',
        podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' },
      },
      execution: { mode: 'fanout' },
      statements: [
        'CREATE DATABASE IF NOT EXISTS analytics',
        `CREATE TABLE IF NOT EXISTS analytics.events (
           id UUID, at DateTime, customer String, amount Decimal(18, 2)
         ) ENGINE = MergeTree
         PARTITION BY toYYYYMM(at)
         ORDER BY (customer, at)`,
        `CREATE TABLE IF NOT EXISTS analytics.daily (
           day Date, customer String, total Decimal(38, 2)
         ) ENGINE = SummingMergeTree ORDER BY (day, customer)`,
        `CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.daily_mv
         TO analytics.daily
         AS SELECT toDate(at) AS day, customer, sum(amount) AS total
         FROM analytics.events GROUP BY day, customer`,
      ],
      settings: { max_execution_time: 60 },
      onDelete: 'run',
      // DROP TABLE also drops a materialized view, on every ClickHouse version
      // (the sandbox's 18.16 has no DROP VIEW).
      deleteStatements: [
        'DROP TABLE IF EXISTS analytics.daily_mv',
        'DROP TABLE IF EXISTS analytics.daily',
        'DROP TABLE IF EXISTS analytics.events',
        'DROP DATABASE IF EXISTS analytics',
      ],
      waitForPod: { timeoutMs: 60000 },
      ...(kubeconfigPath ? { kubeConfig: { kubeconfigPath } } : {}),
    });
    return { fingerprint: schema.fingerprint, podNames: schema.podNames };
  }),
);
