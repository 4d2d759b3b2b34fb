/**
 * The Alchemy v2 resource `ClickHouse.Schema` and its provider.
 *
 * No business logic lives here: validation, fingerprint, the no-op check, pod
 * selection, exec, verification and redaction are the native addon's
 * (`validateConfig`, `plan`, `apply`, `verify`, `destroy`). This file only maps
 * Alchemy's lifecycle onto those calls and keeps runtime-only values out of
 * Alchemy's state.
 */
import * as Context from 'effect/Context';
import * as Effect from 'effect/Effect';
import * as Layer from 'effect/Layer';
import * as Option from 'effect/Option';
import { isResolved } from 'alchemy/Diff';
import type { Input, PropsInput } from 'alchemy/Input';
import * as Provider from 'alchemy/Provider';
import { Resource } from 'alchemy/Resource';

import type { AlchemyKubernetesConnection, ClickHouseSchemaKubeConfig, ClickHouseSchemaProps } from './generated/props.js';
import type { ClickHouseSchemaError } from './errors.js';
import { Unowned } from 'alchemy/AdoptPolicy';
import {
  adopt,
  apply,
  configWarnings,
  destroy,
  plan,
  validateConfig,
  verify,
  type ClickHouseExecutor,
  type ObjectReport,
  type ApplyResult,
  type ClickHouseSchemaEvent,
  type PlanResult,
  type ResolvedClusterConnection,
  type SchemaState,
} from './index.js';


/**
 * What `clickHouseSchema(id, props)` accepts: the props of the JSON Schema
 * (`schema/props.schema.json`, the one the Rust validation uses), except that
 * `readyBarrier` and `kubeConfig` may be Alchemy Outputs.
 */
export type ClickHouseSchemaInput = Omit<ClickHouseSchemaProps, 'readyBarrier' | 'kubeConfig'> & {
  /** Ordering-only: an Output derived from upstream resources. Only the resolved boolean is persisted. */
  readyBarrier?: Input<boolean>;
  /**
   * Which cluster: kubeconfig options, or an Alchemy Kubernetes connection,
   * which may come from another resource (`kubeConfig: cluster` for an
   * `AWS.EKS.Cluster`, whose attributes carry `connection`).
   */
  kubeConfig?: Input<ClickHouseSchemaKubeConfig>;
};

/** The resource: props as persisted by Alchemy (no executor), outputs = the addon's `SchemaState`. */
export type ClickHouseSchema = Resource<'ClickHouse.Schema', ClickHouseSchemaProps, SchemaState>;
export const ClickHouseSchema = Resource<ClickHouseSchema>('ClickHouse.Schema');

/**
 * An executor for every ClickHouseSchema of the stack (tests, embedding): it
 * lists pods and runs execs in place of the Kubernetes API. A service rather
 * than a prop because it is an object of functions, which Alchemy could
 * neither persist nor diff. Provide it with `clickHouseSchemaExecutor(exec)`;
 * without it the provider uses the Kubernetes API.
 */
export class ClickHouseSchemaExecutor extends Context.Service<ClickHouseSchemaExecutor, ClickHouseExecutor>()(
  'alchemy-clickhouse-schema/ClickHouseSchemaExecutor',
) {}

/** A Layer providing `executor` to the provider: `Layer.provide(clickHouseSchemaProvider, clickHouseSchemaExecutor(e))`. */
export const clickHouseSchemaExecutor = (executor: ClickHouseExecutor) =>
  Layer.succeed(ClickHouseSchemaExecutor, executor);

/**
 * Declares a ClickHouse schema inside a Stack program:
 * `const schema = yield* clickHouseSchema('orders-schema', { target, statements })`.
 *
 * The props are validated here, at declaration, by the addon: an invalid
 * config fails the program with the Rust `ClickHouseSchemaError`
 * (`E_INVALID_CONFIG`, naming the resource) before anything reaches state. An
 * unresolved `readyBarrier` Output is validated as `true`, the only value it
 * may resolve to that is persisted; every other prop must be plain data.
 * Valid props that put a secret into state (a statement holding a credential
 * literal: Alchemy stores props verbatim) are logged as warnings, naming the
 * statement, and deploy as written.
 */
export const clickHouseSchema = (id: string, props: ClickHouseSchemaInput) =>
  Effect.suspend(() => {
    const forCheck: Record<string, unknown> = { ...props };
    if (props.readyBarrier !== undefined && typeof props.readyBarrier !== 'boolean') forCheck.readyBarrier = true;
    // A cluster that another resource has yet to create: its connection is
    // validated by every lifecycle call once it has resolved.
    if (props.kubeConfig !== undefined && !isResolved(props.kubeConfig)) delete forCheck.kubeConfig;
    // Validates, and throws synchronously when invalid. Effect.suspend turns
    // that into a defect of the declaring program, which fails the deploy with
    // the error object intact; a typed failure is not an option here, since a
    // Stack program may only fail with Alchemy's ConfigError.
    let warnings: ReturnType<typeof configWarnings>;
    try {
      warnings = configWarnings(id, forCheck);
    } catch (error) {
      throw userFacing(error);
    }
    return Effect.andThen(
      Effect.forEach(warnings, (w) => Effect.logWarning(`ClickHouseSchema '${id}': ${w.path} ${w.reason}`), {
        discard: true,
      }),
      // The cast only bridges the Inputs of readyBarrier and kubeConfig.
      ClickHouseSchema(id, props as PropsInput<ClickHouseSchemaProps>),
    );
  });

/**
 * The plan in one line for the log: which statements (and the objects they
 * declare) an apply would run, and on which pods.
 */
const planned = (result: PlanResult): string => {
  const statements = result.statements.map((s) => `${s.index}: ${s.verb}${s.object ? ` ${s.object}` : ''}`).join('; ');
  const where = result.everyPod
    ? 'every selected pod'
    : result.pods.map((p) => `${p.pod} (${p.why === 'newPod' ? 'new pod' : 'replaced pod'})`).join(', ');
  return `statements [${statements}] on ${where}${converged(result)}${rebuilt(result)}`;
};

/**
 * The rebuild's part of the plan (a rebuild prop): each table that would be rebuilt, what differs,
 * on which pods, or why the apply would refuse it.
 */
const rebuilt = (result: PlanResult): string => {
  const tables = result.rebuild.map(
    (r) => `${r.table} (${r.differences.join(', ')}) on ${r.pods.join(', ')}${r.refused ? `, refused: ${r.refused}` : ''}`,
  );
  return tables.length === 0 ? '' : `; rebuild ${tables.join('; ')}`;
};

/**
 * Convergence's part of the plan (converge: 'additive'), per pod: what each object that differs
 * gets (its changes, in words, and the replica that runs them when it gets them by replication),
 * the live columns kept, and what is refused.
 */
const converged = (result: PlanResult): string => {
  const pods = result.converge
    .map((pod) => {
      const objects = pod.objects.map((o) => {
        const parts = [
          ...o.changes,
          ...(o.replicatedFrom ? [`by replication from ${o.replicatedFrom}`] : []),
          ...o.keptColumns.map((c) => `keep column ${c}`),
          ...o.refused.map((r) => `refused ${r.clause}: ${r.why}`),
        ];
        return `${o.object}: ${parts.join(', ')}`;
      });
      return objects.length === 0 ? '' : `${pod.pod} {${objects.join('; ')}}`;
    })
    .filter(Boolean);
  return pods.length === 0 ? '' : `; converge ${pods.join(' ')}`;
};

/**
 * An Alchemy Kubernetes connection in `kubeConfig` (`Kubernetes.KubeConfig(...)`,
 * a `Kubernetes.Connection`, or a cluster resource carrying one as
 * `connection`), the shapes Alchemy's own `toConnection` accepts; undefined
 * for kubeconfig options or no prop. Which shapes are valid is the addon's
 * validation; this only picks the value to hand to the adapter.
 */
const alchemyConnection = (kubeConfig: unknown): AlchemyKubernetesConnection | undefined => {
  if (typeof kubeConfig !== 'object' || kubeConfig === null) return undefined;
  if ('auth' in kubeConfig) return kubeConfig as AlchemyKubernetesConnection;
  if ('connection' in kubeConfig) return (kubeConfig as { connection: AlchemyKubernetesConnection }).connection;
  return undefined;
};

/**
 * The addon's `options.connection` for props whose `kubeConfig` is an Alchemy
 * Kubernetes connection: when the call needs the cluster, it asks the cluster
 * adapter registered for the auth kind in the stack's providers (as Alchemy's
 * own Kubernetes resources do) for the endpoint, CA and a fresh token. What
 * the adapter yields goes to the addon for that call and nowhere else: not
 * into props, outputs, logs or progress. A failure (no adapter registered,
 * the cluster gone, an exec plugin failing) rejects, and the addon fails the
 * call with `E_KUBERNETES_API`, redacted.
 */
const clusterConnection = (kubeConfig: unknown) =>
  Effect.gen(function* () {
    const connection = alchemyConnection(kubeConfig);
    if (connection === undefined) return undefined;
    const kind = connection.auth.kind;
    // Loaded only for such props (alchemy/Kubernetes as a whole takes about half a second to import).
    const { ClusterAdapter } = yield* Effect.promise(() => import('alchemy/Kubernetes/ClusterAdapter'));
    const adapter = Option.getOrUndefined(yield* Effect.serviceOption(ClusterAdapter(kind)));
    return (): Promise<ResolvedClusterConnection> => {
      if (adapter === undefined) {
        return Promise.reject(
          new Error(
            `no Kubernetes cluster adapter is registered for auth kind '${kind}': add the provider layer that ` +
              "contributes it to the stack's providers (Kubernetes.providers() for 'kubeconfig' and 'exec', " +
              "AWS.providers() for 'aws-eks')",
          ),
        );
      }
      return Effect.runPromise(
        adapter.connect(connection as Parameters<typeof adapter.connect>[0]).pipe(
          Effect.flatMap((transport) =>
            Effect.flatMap(transport.headers, (headers) =>
              Effect.try({
                try: (): ResolvedClusterConnection => {
                  const token = bearerToken(kind, headers);
                  const { certificateAuthorityData: ca, insecureSkipTlsVerify: insecure, clientCert } = transport;
                  return {
                    endpoint: transport.endpoint,
                    ...(ca !== undefined && { certificateAuthorityData: ca }),
                    ...(insecure !== undefined && { insecureSkipTlsVerify: insecure }),
                    ...(token !== undefined && { token }),
                    ...(clientCert !== undefined && { clientCert }),
                  };
                },
                catch: (error) => error as Error,
              }),
            ),
          ),
        ),
      );
    };
  });

/**
 * The token of the adapter's `Authorization: Bearer` header. The addon sends
 * a bearer token or a client certificate, nothing else, so any other header
 * is refused (by name; a value could be a credential).
 */
const bearerToken = (kind: string, headers: Record<string, string>): string | undefined => {
  let token: string | undefined;
  for (const [name, value] of Object.entries(headers)) {
    const bearer = /^Bearer (.+)$/i.exec(value);
    if (name.toLowerCase() !== 'authorization' || !bearer) {
      throw new Error(
        `the cluster adapter for auth kind '${kind}' asks for the request header '${name}'` +
          (name.toLowerCase() === 'authorization' ? ' with a scheme other than Bearer' : '') +
          '; only a bearer token or a client certificate can be sent',
      );
    }
    token = bearer[1];
  }
  return token;
};

/**
 * One drifted object on one pod, in words: `orders.totals missing on chi-...`,
 * or what differs (the addon's redacted differences).
 */
const drifted = (id: string, pod: string, object: ObjectReport): string => {
  const what =
    object.status === 'missing'
      ? 'missing'
      : `differs (${object.differences.map((d) => `${d.clause} is \`${d.live}\`, declared \`${d.declared}\``).join('; ')})`;
  return `ClickHouseSchema '${id}': drift: ${object.name} ${what} on ${pod} (statement ${object.statementIndex})`;
};

/** What an apply did, in words: `applied to <where>`, or why nothing ran. */
const outcome = (result: ApplyResult, where: string): string =>
  !result.changed
    ? 'unchanged, no statement ran'
    : result.appliedTo.length === 0
      ? `recorded ${result.state.podNames.length} pod(s) whose ledger holds this schema, no statement ran`
      : `applied to ${where}`;

/**
 * Alchemy's marker for an error whose message is written for the user
 * (`alchemy/UserFacingError`, a registered symbol): the CLI then prints
 * `error: <message>` alone, not the cause with the addon's and Alchemy's
 * stack frames after it. Every message of the addon's errors is such a one.
 * Not enumerable, so the error's own properties stay as the addon made them.
 */
const userFacing = <E>(error: E): E => {
  if (typeof error === 'object' && error !== null && Object.isExtensible(error)) {
    Object.defineProperty(error, Symbol.for('alchemy/UserFacingError'), { value: true, configurable: true });
  }
  return error;
};

/**
 * Runs an addon call, keeping its `ClickHouseSchemaError` (code,
 * statementIndex, pod, ...) as the typed failure; the addon rejects with
 * nothing else. `f` gets the fiber's `AbortSignal` for the addon's
 * `options.signal`: when Alchemy interrupts the deploy (Ctrl-C, a timeout, a
 * failed sibling), the signal aborts and the addon takes its cancel path (no
 * statement starts, an exec in flight is closed, the lease is released,
 * nothing is recorded). The interruption then waits for the call to settle,
 * so that a process exiting right after it does not cut the release short.
 * (`Effect.tryPromise` aborts the signal too, but does not wait.)
 */
const call = <A>(f: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, ClickHouseSchemaError> =>
  Effect.callback<A, ClickHouseSchemaError>((resume, signal) => {
    let settled: Promise<unknown>;
    try {
      settled = f(signal).then(
        (value) => resume(Effect.succeed(value)),
        (error: unknown) => resume(Effect.fail(userFacing(error as ClickHouseSchemaError))),
      );
    } catch (error) {
      resume(Effect.fail(userFacing(error as ClickHouseSchemaError)));
      return;
    }
    return Effect.promise(() => settled);
  });

/**
 * The provider. Merge it into the Stack's providers:
 * `Layer.mergeAll(clickHouseSchemaProvider, ...)`.
 *
 * Why `diff` probes the cluster: when `diff` returns nothing, Alchemy compares
 * the props itself and, if they are unchanged, never calls `reconcile`. But an
 * unchanged schema still has work to do when the topology changed under it: a
 * pod added (or replaced, same name with a new uid) since the last deploy has
 * no tables. So `diff` asks the addon's `plan` — the exact no-op rules `apply`
 * uses (fingerprint, target, cluster identity, and under fanout one pod list
 * compared by uid with `state.pods`; no cluster call under onCluster) — and
 * returns `{ action: 'update' }` when plan says apply would run something.
 * Otherwise it returns undefined and lets Alchemy's own props comparison
 * decide (changed props → update → `apply`, which makes its own no-op check
 * and records the new props; unchanged props → no-op, no reconcile). The
 * alternative, always returning `update`, would call `apply` on every deploy:
 * correct, but it would rewrite state and report an update for every
 * unchanged schema. Cost: one pod list per deploy under fanout (two if
 * another resource's props reference this one, since Alchemy then runs diff
 * twice); none under onCluster.
 */
export const clickHouseSchemaProvider = Provider.effect(
  ClickHouseSchema,
  Effect.gen(function* () {
    const executor = Option.getOrUndefined(yield* Effect.serviceOption(ClickHouseSchemaExecutor));
    /** The options of one addon call on `props`: the executor, and the cluster connection when there is one. */
    const optionsFor = (props: { kubeConfig?: unknown } | undefined) =>
      Effect.map(clusterConnection(props?.kubeConfig), (connection) => ({
        ...(executor ? { executor } : {}),
        ...(connection ? { connection } : {}),
      }));
    return {
      diff: ({ id, news, output }) => {
        // First create: nothing recorded, the engine creates.
        if (output === undefined) return Effect.void;
        // Unresolved Outputs (readyBarrier fed by an upstream that is itself being
        // created or updated): skip the probe. Alchemy treats the Output-fed prop as
        // changed and reconciles, and `apply` makes the full check then.
        if (!isResolved(news)) return Effect.void;
        return optionsFor(news).pipe(
          Effect.flatMap((options) => call((signal) => plan(id, news, output, { ...options, signal }))),
          Effect.flatMap((result) =>
            // At debug level: the CLI draws its plan view while diff runs, and an
            // info line would be written across it; `alchemy plan` shows the update.
            result.changed
              ? Effect.logDebug(`ClickHouseSchema '${id}': update needed (${result.reason ?? 'plan says apply would run'}): ${planned(result)}`).pipe(
                  Effect.as({ action: 'update' as const }),
                )
              : Effect.succeed(undefined),
          ),
          // A failed probe (API unreachable, pods not Ready, ...) cannot prove that
          // nothing has to run, so it must not turn into a silent no-op. We
          // reconcile instead of failing the plan: `apply` makes the same check with
          // its full waitForPod/retry budget and, if the cluster is still failing,
          // fails this resource (and what depends on it) with the complete
          // ClickHouseSchemaError, instead of failing the whole plan from here.
          Effect.catch((error) =>
            Effect.logWarning(
              `ClickHouseSchema '${id}': the no-op check failed (${error.message}); reconciling, so apply checks again`,
            ).pipe(Effect.as({ action: 'update' as const })),
          ),
        );
      },
      reconcile: ({ id, news, output, session }) => {
        // The addon's events arrive on the JS thread while apply runs: each is
        // shown at once as the row's progress (`statement 7 (20 in all) on chi-... (3 of
        // 8 pods done)`); a live-schema warning (verify: 'warn') is also
        // logged as a warning once apply settles.
        const warnings: ClickHouseSchemaEvent[] = [];
        const onEvent = (event: ClickHouseSchemaEvent) => {
          if (event.kind === 'schemaMismatch' || event.kind === 'verificationFailed') warnings.push(event);
          Effect.runFork(session.note(event.message, { kind: 'status' }));
        };
        const shown = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve))).pipe(
          Effect.andThen(() =>
            Effect.forEach(warnings, (event) => Effect.logWarning(`ClickHouseSchema '${id}': ${event.message}`), {
              discard: true,
            }),
          ),
        );
        return optionsFor(news).pipe(
          Effect.flatMap((options) => call((signal) => apply(id, news, output, { ...options, onEvent, signal }))),
          Effect.ensuring(shown),
          // The row's last progress line, which the CLI keeps on its settle line
          // (`updated — applied to 3 pod(s)`). Only there: a log line would say it
          // again, and be drawn across the CLI's live view.
          Effect.tap((result) => session.note(outcome(result, result.appliedTo.length + ' pod(s)'), { kind: 'status' })),
          // The outputs are the addon's SchemaState: no kubeConfig, no executor, no
          // readyBarrier, no statement text.
          Effect.map((result) => result.state),
        );
      },
      // Alchemy settles the row as "deleted" whatever a provider did; the note
      // (on the settle line) says what that meant here, since under 'retain'
      // (the default) every table stays. Which policy applies is the addon's
      // reading of the props, defaults included.
      delete: ({ id, olds, output, session }) =>
        optionsFor(olds).pipe(
          Effect.flatMap((options) => call((signal) => destroy(id, olds, output, { ...options, signal }))),
          Effect.andThen(() =>
            session.note(
              validateConfig(id, olds).onDelete === 'run'
                ? `ran deleteStatements on ${output.podNames.length} pod(s)`
                : "retained (onDelete 'retain'): nothing ran, the tables are kept",
              { kind: 'status' },
            ),
          ),
        ),
      // Drift (`alchemy drift`): the addon's `verify` looks up the declared
      // objects on every recorded pod. When a pod lacks one, or holds another
      // definition, the observed attributes are the recorded state without that
      // pod, so they differ from the persisted ones (Alchemy reports drift) and a
      // repair's `apply` sees a pod it has not covered and re-runs the statements
      // on exactly that pod; a differing object then fails as E_SCHEMA_MISMATCH.
      // Without recorded outputs (a first deploy, or a lost state) Alchemy asks
      // whether the schema already exists and whose it is: the addon's `adopt`
      // reads the ledgers (only with the ledger prop; otherwise it answers
      // `absent` without a call). Owned: the state is adopted silently and the
      // following update runs nothing; unowned (another resource id applied it,
      // or its objects exist with no ledger entry): Alchemy refuses unless the
      // user adopts; absent: Alchemy creates.
      read: ({ id, olds, output }) => {
        if (olds === undefined) return Effect.succeed(undefined);
        if (output === undefined) {
          return optionsFor(olds).pipe(
            Effect.flatMap((options) => call((signal) => adopt(id, olds, { ...options, signal }))),
            Effect.map((found): SchemaState | undefined =>
              found.state === undefined || found.ownership === 'absent'
                ? undefined
                : found.ownership === 'owned'
                  ? found.state
                  : Unowned(found.state),
            ),
          );
        }
        return optionsFor(olds).pipe(
          Effect.flatMap((options) => call((signal) => verify(id, olds, output, { ...options, signal }))),
          // What drifted, one line per pod and object: `alchemy drift` itself
          // only says that the resource would be updated.
          Effect.tap((result) =>
            Effect.forEach(
              result.pods.flatMap((p) => p.objects.filter((o) => o.status !== 'ok').map((o) => drifted(id, p.pod, o))),
              (line) => Effect.logWarning(line),
              { discard: true },
            ),
          ),
          Effect.map((result): SchemaState => {
            if (!result.drifted) return output;
            const stale = new Set(result.pods.filter((p) => p.objects.some((o) => o.status !== 'ok')).map((p) => p.pod));
            return {
              ...output,
              pods: output.pods.filter((p) => !stale.has(p.name)),
              podNames: output.podNames.filter((name) => !stale.has(name)),
            };
          }),
        );
      },
    };
  }),
);
