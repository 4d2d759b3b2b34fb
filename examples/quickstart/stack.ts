/**
 * The spec's quick start, pointed at the local sandbox: the quick-start schema
 * applied to every ClickHouse pod labelled `clickhouse.altinity.com/chi=sandbox`
 * in namespace `sandbox`. The cluster is the kubeconfig in `SANDBOX_KUBECONFIG`
 * (else the ambient kubeconfig).
 *
 * Deploy: `node examples/run.mjs quickstart deploy` (see examples/run.mjs).
 */
import * as Alchemy from 'alchemy';
import * as Effect from 'effect/Effect';
import { clickHouseSchema, clickHouseSchemaProvider } from 'alchemy-clickhouse-schema';

const kubeconfigPath = process.env.SANDBOX_KUBECONFIG;

export const stack = Alchemy.Stack(
  'quickstart',
  { providers: clickHouseSchemaProvider, state: Alchemy.localState() },
  Effect.gen(function* () {
    const schema = yield* clickHouseSchema('orders-schema', {
      target: {
        namespace: 'sandbox',
        podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' },
      },
      statements: [
        'CREATE DATABASE IF NOT EXISTS orders',
        `CREATE TABLE IF NOT EXISTS orders.events (
           id UUID, at DateTime, payload String
         ) ENGINE = MergeTree ORDER BY at`,
      ],
      ...(kubeconfigPath ? { kubeConfig: { kubeconfigPath } } : {}),
    });
    return {
      fingerprint: schema.fingerprint,
      statementCount: schema.statementCount,
      podNames: schema.podNames,
      clusterId: schema.clusterId,
    };
  }),
);
