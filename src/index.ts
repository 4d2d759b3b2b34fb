/**
 * Package entry point. Everything here forwards to the addon; the rules
 * (validation, fingerprint, redaction) live in Rust so that they are the same
 * for every caller. The addon is the native build where one matches the
 * platform, else (or with `NAPI_RS_FORCE_WASI`) the WebAssembly build, which
 * reaches Kubernetes through `./kubernetes.ts`.
 */
import { createRequire } from 'node:module';

import type * as binding from '../index.js';

/**
 * The addon, through napi-rs's generated loader (`index.js`), which takes the
 * platform package npm installed next to this one, else the WebAssembly one.
 * When neither loads, that loader's error says only "Cannot find native
 * binding" and blames an npm bug, with the reasons four causes deep; this
 * one names the package this machine needs and the command that installs it.
 */
const addon: typeof binding = await import('../index.js').catch((error: unknown) => {
  throw missingAddon(error);
});

/** The error for an addon that did not load: which package, and how to get it. */
function missingAddon(error: unknown): Error {
  const require = createRequire(import.meta.url);
  const manifest = require('../package.json') as { name: string; version: string; optionalDependencies?: object };
  const { name, version } = manifest;
  const { platform, arch } = process;
  // napi-rs's package names (README's table): libc on Linux; the MinGW build on Windows.
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  const flavour = platform === 'linux' ? (header?.glibcVersionRuntime ? '-gnu' : '-musl') : platform === 'win32' ? '-gnu' : '';
  const wanted = `${name}-${platform}-${arch}${flavour}`;
  const wasm = `npm install --cpu=wasm32 ${name}-wasm32-wasi@${version}`;
  // The released manifest lists every platform package (napi pre-publish writes them).
  const published = manifest.optionalDependencies === undefined || wanted in manifest.optionalDependencies;
  const isInstalled = (pkg: string) => {
    try {
      require.resolve(`${pkg}/package.json`);
      return true;
    } catch {
      return false;
    }
  };
  const installed = isInstalled(wanted);
  // Installed with --cpu=wasm32 (or the native package failed and this is the fallback).
  const wasmInstalled = isInstalled(`${name}-wasm32-wasi`);
  // The loader's reasons, less its probes of files and packages that are not
  // there (it tries every flavour): what failed in what is there.
  const all: string[] = [];
  for (let e: unknown = error; e instanceof Error && all.length < 8; e = e.cause) {
    const line = e.message.split('\n')[0] ?? '';
    if (!line.startsWith('Cannot find native binding') && !all.includes(line)) all.push(line);
  }
  const failed = all.filter((line) => !line.startsWith('Cannot find module'));
  const reasons = failed.length > 0 ? failed : all;
  const message = wasmInstalled && !installed
    ? `${name}: the WebAssembly build (${name}-wasm32-wasi) is installed but did not load (${reasons.join('; ')}); ` +
      `reinstall it (${wasm})` +
      (published ? `, or install this machine's native package: npm install ${wanted}@${version}` : '')
    : !published
    ? `${name}: no native binary is published for ${platform} ${arch}; install the WebAssembly build: ${wasm}`
    : installed
      ? `${name}: ${wanted} is installed but its binary did not load (${reasons.join('; ')}); ` +
        `reinstall it (npm install ${wanted}@${version}), or use the WebAssembly build: ${wasm}`
      : `${name}: the package with this machine's binary, ${wanted}, is not installed. npm installs it with ` +
        `${name} unless optional dependencies are skipped (--omit=optional, or a package-lock.json written on ` +
        `another platform). Install it: npm install ${wanted}@${version} (or the WebAssembly build: ${wasm})`;
  return new Error(message);
}

/**
 * Which build of the addon was loaded: `'native'`, or the WebAssembly flavor
 * (`'wasm32-wasi'`, built for wasm32-wasip1-threads).
 */
export const addonTarget: string = addon.__napiBindingTarget;
/**
 * The WebAssembly build has no Kubernetes client of its own; the package
 * supplies one. Loaded only then: `@kubernetes/client-node` alone takes about
 * 0.7 s to import, which the native build has no use for.
 */
const wasmTransport = addonTarget === 'native' ? undefined : await import('./kubernetes.js');

export type { ClickHouseSchemaError, ClickHouseSchemaErrorCode, ConfigIssue } from './errors.js';
export { isClickHouseSchemaError } from './errors.js';
export type { RedactedOutput } from '../index.js';

/**
 * Validates props for the resource `id` and returns them with every default
 * applied. Throws a `ClickHouseSchemaError` with `code: 'E_INVALID_CONFIG'`
 * whose `issues` list every problem.
 */
export function validateConfig(id: string, props: unknown): Record<string, unknown> {
  return addon.validateConfig(id, props) as Record<string, unknown>;
}

/**
 * Warnings about valid props (validates first and throws like
 * `validateConfig`): each statement holding a credential literal, which
 * Alchemy would store verbatim with the props, with what to use instead.
 */
export function configWarnings(id: string, props: unknown): binding.ConfigWarning[] {
  return addon.configWarnings(id, props);
}

/** sha256 hex over what is applied; validates first and throws like `validateConfig`. */
export function fingerprint(props: unknown, id?: string): string {
  return addon.fingerprint(props, id);
}

/**
 * Redacts clickhouse-client output produced by `statement`: the statement and
 * its literals never survive, the ClickHouse code and exception class do.
 */
export function redactClickHouseOutput(output: string, statement: string): binding.RedactedOutput {
  return addon.redactClickHouseOutput(output, statement);
}

export type {
  AdoptResult,
  ApplyResult,
  PodLedgerStatus,
  StatusResult,
  ClickHouseExecutor,
  ClickHouseSchemaEvent,
  DifferenceReport,
  ObjectReport,
  PodReport,
  VerifyResult,
  ConfigWarning,
  LifecycleOptions,
  ExecutorExecRequest,
  ExecutorExecResult,
  ExecutorPod,
  PlanResult,
  PodRef,
  ResolvedClientCert,
  ResolvedClusterConnection,
  RecordedTarget,
  SchemaState,
} from '../index.js';

/**
 * Brings the cluster to `props` for resource `id` and resolves to the state to
 * record (`changed: false` and the previous state when nothing had to run).
 * Rejects with a `ClickHouseSchemaError`; record nothing then. `options` may
 * inject an executor and carry an `AbortSignal` (see `LifecycleOptions`).
 */
export function apply(
  id: string,
  props: unknown,
  previousState?: binding.SchemaState,
  options?: binding.LifecycleOptions,
): Promise<binding.ApplyResult> {
  return withAddonOptions(options, (o) => addon.apply(id, props, previousState ?? null, o));
}

/**
 * Would `apply` run anything? Makes only the calls of apply's no-op check (one
 * pod list under fanout, none under onCluster) and runs no statement.
 */
export function plan(
  id: string,
  props: unknown,
  previousState?: binding.SchemaState,
  options?: binding.LifecycleOptions,
): Promise<binding.PlanResult> {
  return withAddonOptions(options, (o) => addon.plan(id, props, previousState ?? null, o));
}

/**
 * Looks up the objects the statements declare (databases, tables, views,
 * materialized views, dictionaries) on every pod `state` records, one exec per
 * pod, and compares each with its declaration as the server prints both. Runs
 * no statement. `drifted` is true when any pod lacks an object or holds another
 * definition; each object says `ok`, `missing` or `differs` (with the parts).
 */
export function verify(
  id: string,
  props: unknown,
  state?: binding.SchemaState,
  options?: binding.LifecycleOptions,
): Promise<binding.VerifyResult> {
  return withAddonOptions(options, (o) => addon.verify(id, props, state ?? null, o));
}

/**
 * Each matching pod's ledger entry for resource `id` (needs the `ledger`
 * prop): the fingerprint its newest row holds, when, and whether that is the
 * props' current one. Runs no statement.
 */
export function status(id: string, props: unknown, options?: binding.LifecycleOptions): Promise<binding.StatusResult> {
  return withAddonOptions(options, (o) => addon.status(id, props, o));
}

/**
 * Alchemy's adoption contract for resource `id` with no recorded state, from
 * the ledgers: `owned` (this id applied the current fingerprint), `unowned`
 * (another id did, or the objects exist with no ledger entry) or `absent`,
 * with the state to adopt. Without the `ledger` prop: `absent`, no call.
 */
export function adopt(id: string, props: unknown, options?: binding.LifecycleOptions): Promise<binding.AdoptResult> {
  return withAddonOptions(options, (o) => addon.adopt(id, props, o));
}

/** Deletes resource `id` per its `onDelete` (`retain` never reaches the cluster). */
export function destroy(
  id: string,
  props: unknown,
  state?: binding.SchemaState,
  options?: binding.LifecycleOptions,
): Promise<void> {
  return withAddonOptions(options, (o) => addon.destroy(id, props, state ?? null, o));
}

/**
 * Calls the addon with the options as it sees them: under WebAssembly with
 * the JavaScript Kubernetes transport (used when no executor is given, and to
 * resolve a `kubeConfig` prop into the cluster identity) and JavaScript's
 * timers, and with the executor guarded. The transport lives as long as the
 * call.
 */
function withAddonOptions<T>(
  options: binding.LifecycleOptions | undefined,
  call: (options: binding.LifecycleOptions | null) => Promise<T>,
): Promise<T> {
  const addonOptions = guarded(options);
  if (!wasmTransport) return call(addonOptions);
  // What the caller gave goes to the addon as given, for its check of the
  // options to name (a `signal` that is no AbortSignal, a `timers` without
  // `sleep`); the transport only listens to a signal it can listen to.
  const signal = options?.signal;
  const transport = wasmTransport.kubernetesApi(typeof signal?.addEventListener === 'function' ? signal : undefined);
  try {
    return call({ ...addonOptions, kubernetes: transport.api, timers: options?.timers ?? hostTimers }).finally(
      transport.dispose,
    );
  } catch (err) {
    transport.dispose();
    throw err;
  }
}

/**
 * The WebAssembly build's timers (backoff, exec and list bounds): `setTimeout`,
 * unref'd like tokio's timers natively. A bound outlives the work it bounded
 * when that work finishes first, and must not keep the process alive; the
 * call's own pending promise keeps it alive while a backoff runs.
 */
const hostTimers: binding.HostTimers = {
  sleep: (ms) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref()),
};

/**
 * The executor as the addon sees it: every call returns a promise (a
 * synchronous throw becomes a rejection), and every rejection is an `Error`.
 * Node-API hands a native addon no text for a rejection with `undefined`,
 * `null`, a plain object or a Symbol, so the error a user finally reads
 * would say nothing; this gives each one a message. A plain object's keys
 * are named, never its values (they may hold a statement).
 */
function guarded(options: binding.LifecycleOptions | undefined): binding.LifecycleOptions | null {
  if (!options) return null;
  const { executor } = options;
  // Anything but an executor goes through as given, so that the addon's check
  // of the options names it instead of a wrapper hiding it.
  if (typeof executor?.listPods !== 'function' || typeof executor.exec !== 'function') return options;
  const settle = <A>(call: () => Promise<A>): Promise<A> =>
    Promise.resolve()
      .then(call)
      .catch((reason: unknown) => {
        throw reason instanceof Error ? reason : new Error(describeRejection(reason));
      });
  return {
    ...options,
    executor: {
      listPods: (namespace, selector) => settle(() => executor.listPods(namespace, selector)),
      exec: (request) => settle(() => executor.exec(request)),
    },
  };
}

function describeRejection(reason: unknown): string {
  const fix = 'reject with an Error that says what failed';
  if (reason === undefined || reason === null) return `it rejected with ${String(reason)} and gave no reason; ${fix}`;
  if (typeof reason === 'symbol') return `it rejected with a Symbol (${reason.description ?? ''}), not an Error; ${fix}`;
  if (typeof reason === 'object') {
    const keys = Object.keys(reason).slice(0, 10).join(', ');
    return `it rejected with a plain object (keys: ${keys || 'none'}), not an Error; ${fix}`;
  }
  return String(reason);
}

// The Alchemy resource and provider, and the props' types generated from
// schema/props.schema.json (ClickHouseSchemaProps and its parts).
export type * from './generated/props.js';
export type { ClickHouseSchemaInput } from './provider.js';
export {
  ClickHouseSchema,
  ClickHouseSchemaExecutor,
  clickHouseSchema,
  clickHouseSchemaExecutor,
  clickHouseSchemaProvider,
} from './provider.js';
