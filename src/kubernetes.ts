/**
 * The Kubernetes transport of the WebAssembly build, over the official
 * JavaScript client (`@kubernetes/client-node`).
 *
 * kube-rs does not build for WebAssembly, so the WASM addon cannot open a
 * socket. This is the JavaScript counterpart of `crates/kube`: it does the I/O
 * and reports raw facts (the kubeconfig's endpoint fields, pods, an exec's
 * output and status frame, HTTP statuses) to the addon, which decides
 * everything with the same core functions as the native transport: the label
 * selector, the exit code, what is retried, the bounds, refusing credentials
 * over plain HTTP, the cluster identity and the redaction of every message.
 *
 * What it does the way `crates/kube` does, so that both builds behave alike
 * and record the same `clusterId` for the same kubeconfig:
 * - configuration: the `kubeConfig` prop (inline cluster and user, a file,
 *   `context`, `server` and `skipTLSVerify` overrides), else `KUBECONFIG`
 *   (merged, first wins, as kube-rs and kubectl merge), else
 *   `~/.kube/config`, else the in-cluster service account. The files are read
 *   here, as YAML, so the endpoint is the file's own text (client-node rewrites
 *   the server URL); relative file paths are made absolute against each file's
 *   directory by joining, as kube-rs does. client-node then authenticates from
 *   the same data (tokens, token files, client certificates, exec plugins,
 *   auth providers, the cluster's `proxy-url`).
 * - exec: a WebSocket offering `v5.channel.k8s.io`, then `v4`; the statement
 *   is written to stdin once and stdin is never closed (the command frames it
 *   with `head -c N`); output is capped per stream but read to the end; the
 *   status frame ends the exec and is handed to the addon as it came.
 * - an API answer read whole (a pod list, a lease) is capped
 *   (`MAX_ANSWER_BYTES`): past it the connection is closed and the call fails.
 * - credentials never reach a message: a credential plugin's failure is
 *   described, not printed (client-node puts its stderr in the error), and the
 *   addon redacts whatever text comes back from here.
 */
import { existsSync, readFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import { createRequire } from 'node:module';
import { homedir, hostname } from 'node:os';
import { delimiter, isAbsolute } from 'node:path';
import { pathToFileURL } from 'node:url';

import type { Cluster, KubeConfig as KubeConfigType } from '@kubernetes/client-node';
import type WebSocketType from 'ws';

/**
 * This transport's dependencies belong to the WebAssembly package
 * (`alchemy-clickhouse-schema-wasm32-wasi`), so a project on the native build
 * does not install `@kubernetes/client-node` and its dependencies (about 60 MB)
 * for nothing. They are resolved from that package's own directory, which
 * holds under any package manager's layout; in this repository, where the
 * WebAssembly build is loaded from the working tree, they are its development
 * dependencies.
 */
async function importDependency<T>(name: string): Promise<T> {
  const here = createRequire(import.meta.url);
  const anchors: Array<() => string> = [
    () => here.resolve('alchemy-clickhouse-schema-wasm32-wasi/package.json'),
    () => import.meta.url,
  ];
  let lastError: unknown;
  for (const anchor of anchors) {
    try {
      return (await import(pathToFileURL(createRequire(anchor()).resolve(name)).href)) as T;
    } catch (e) {
      lastError = e;
    }
  }
  throw new Error(
    `the WebAssembly build's Kubernetes transport needs ${name}, a dependency of the alchemy-clickhouse-schema-wasm32-wasi package: install that package (npm install --cpu=wasm32 alchemy-clickhouse-schema)`,
    { cause: lastError },
  );
}

const { KubeConfig } = await importDependency<typeof import('@kubernetes/client-node')>('@kubernetes/client-node');
const yaml = (await importDependency<{ default: typeof import('js-yaml') }>('js-yaml')).default;
const WebSocket = (await importDependency<{ default: typeof WebSocketType }>('ws')).default;
type WebSocket = WebSocketType;
type KubeConfig = KubeConfigType;

import type {
  ExecutorPod,
  KubernetesApi,
  KubernetesEndpoint,
  KubernetesExecOutcome,
  KubernetesExecRequest,
  KubernetesFailure,
  KubernetesLeaseOutcome,
  KubernetesLeaseRequest,
  KubernetesPodList,
  KubernetesResolution,
} from '../index.js';

/** Where a resolved connection comes from, in messages (as the native transport says it). */
const RESOLVED_ORIGIN = 'the Alchemy Kubernetes connection';

/** A connection the caller resolved for this call (`options.connection`), as the addon passes it. */
interface ResolvedConnectionArg {
  endpoint: string;
  certificateAuthorityData?: string | null;
  insecureSkipTlsVerify?: boolean;
  token?: string | null;
  clientCert?: { certificate: string; key: string } | null;
}

/** The `kubeConfig` prop as validation leaves it (see `KubeConfigOptions` in core), or a resolved connection. */
interface KubeConfigProp {
  resolvedConnection?: ResolvedConnectionArg;
  kubeconfigPath?: string;
  loadFromDefault?: boolean;
  context?: string;
  server?: string;
  skipTLSVerify?: boolean;
  cluster?: { name: string; server: string; skipTLSVerify?: boolean; caData?: string; caFile?: string };
  user?: { name: string; certFile?: string; keyFile?: string };
}

/** A kubeconfig as YAML gives it (only the parts read here are typed). */
interface RawKubeconfig {
  clusters: Array<{ name: string; cluster?: Record<string, unknown> }>;
  users: Array<{ name: string; user?: Record<string, unknown> }>;
  contexts: Array<{ name: string; context?: { cluster?: string; user?: string } }>;
  'current-context'?: string | null | undefined;
}

const INLINE_CONTEXT = 'clickhouse-schema';
const IN_CLUSTER_NAME = 'inCluster';
const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';
const CHANNEL_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const STATUS = 3;

class ConfigError extends Error {}

/** Where the requests go, and with what. */
interface Connection {
  server: string;
  clusterName: string;
  kubeConfig: KubeConfig | undefined; // undefined: anonymous plain HTTP
}

/**
 * A transport for one lifecycle call. `signal` (the call's AbortSignal) closes
 * every exec still open when it aborts, as dropping an exec closes the
 * WebSocket natively; `dispose` (once the call settled) lets go of the
 * signal, which may outlive many calls.
 */
export function kubernetesApi(signal?: AbortSignal): { api: KubernetesApi; dispose: () => void } {
  let connection: Connection | undefined;
  const open = new Set<WebSocket>();
  const abort = () => open.forEach((ws) => ws.terminate());
  signal?.addEventListener('abort', abort, { once: true });
  const connected = (): Connection => {
    if (!connection) throw new Error('internal: listPods or exec before resolve');
    return connection;
  };
  return {
    api: {
      resolve: async (kubeConfig: unknown) => {
        const { resolution, connect } = resolve((kubeConfig ?? {}) as KubeConfigProp);
        connection = connect;
        return resolution;
      },
      connect: async (proxyUrl: string | null) => {
        // The proxy the addon chose (the cluster's proxy-url, else HTTPS_PROXY /
        // HTTP_PROXY unless NO_PROXY names the server); client-node's agents
        // (http(s) CONNECT, socks) carry the requests and WebSockets through it.
        const { kubeConfig, clusterName } = connected();
        if (!kubeConfig) return;
        kubeConfig.clusters = kubeConfig.clusters.map((cluster): Cluster => {
          if (cluster.name !== clusterName) return cluster;
          const { proxyUrl: _configured, ...rest } = cluster;
          return proxyUrl ? { ...rest, proxyUrl } : rest;
        });
      },
      listPods: (namespace, labelSelector) => listPods(connected(), namespace, labelSelector),
      exec: (request) => exec(connected(), request, open),
      lease: (request) => lease(connected(), request),
      identity: `${hostname()}/${process.pid}`,
    },
    dispose: () => signal?.removeEventListener('abort', abort),
  };
}

// ---------------------------------------------------------------------------
// Configuration

function resolve(o: KubeConfigProp): { resolution: KubernetesResolution; connect: Connection | undefined } {
  try {
    let found: [RawKubeconfig, string] | undefined;
    if (o.resolvedConnection) {
      return fromKubeconfig(resolvedConnection(o.resolvedConnection), RESOLVED_ORIGIN, {}, `the endpoint of ${RESOLVED_ORIGIN}`);
    } else if (o.cluster && o.user) {
      found = [inline(o), 'kubeConfig (inline cluster and user)'];
    } else if (o.kubeconfigPath !== undefined) {
      found = [readKubeconfig(o.kubeconfigPath), `kubeconfig ${o.kubeconfigPath}`];
    } else if (o.loadFromDefault === false) {
      throw new ConfigError('kubeConfig.loadFromDefault: is false, and nothing else names a configuration');
    } else {
      found = ambient();
    }
    return found ? fromKubeconfig(found[0], found[1], o) : inCluster(o);
  } catch (err) {
    // Configuration messages are ours; anything else (a YAML parser's) is
    // summarised, since its snippet could be a token line.
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`the Kubernetes configuration could not be loaded: ${describe(err)}`);
  }
}

/**
 * A connection the caller resolved for this call (an Alchemy cluster
 * adapter's endpoint, CA and token), as a kubeconfig held in memory only. The
 * addon records the identity from the endpoint, CA and TLS switch itself.
 */
function resolvedConnection(c: ResolvedConnectionArg): RawKubeconfig {
  const name = 'alchemy-connection';
  const user: Record<string, unknown> = {};
  if (c.token) user.token = c.token;
  if (c.clientCert) {
    user['client-certificate-data'] = Buffer.from(c.clientCert.certificate).toString('base64');
    user['client-key-data'] = Buffer.from(c.clientCert.key).toString('base64');
  }
  return {
    clusters: [
      {
        name,
        cluster: {
          server: c.endpoint,
          'insecure-skip-tls-verify': c.insecureSkipTlsVerify,
          'certificate-authority-data': c.certificateAuthorityData ?? undefined,
        },
      },
    ],
    users: [{ name, user }],
    contexts: [{ name, context: { cluster: name, user: name } }],
    'current-context': name,
  };
}

function inline(o: KubeConfigProp): RawKubeconfig {
  const { cluster, user } = o as Required<Pick<KubeConfigProp, 'cluster' | 'user'>>;
  const context = o.context ?? INLINE_CONTEXT;
  return {
    clusters: [
      {
        name: cluster.name,
        cluster: {
          server: cluster.server,
          'insecure-skip-tls-verify': cluster.skipTLSVerify,
          'certificate-authority': cluster.caFile,
          'certificate-authority-data': cluster.caData,
        },
      },
    ],
    users: [{ name: user.name, user: { 'client-certificate': user.certFile, 'client-key': user.keyFile } }],
    contexts: [{ name: context, context: { cluster: cluster.name, user: user.name } }],
    'current-context': context,
  };
}

/** `KUBECONFIG`'s files (merged, first wins), else `~/.kube/config`; undefined when neither exists. */
function ambient(): [RawKubeconfig, string] | undefined {
  const value = process.env.KUBECONFIG;
  const paths = (value ?? '').split(delimiter).filter((p) => p !== '');
  if (paths.length > 0) {
    const merged: RawKubeconfig = { clusters: [], users: [], contexts: [] };
    for (const path of paths) mergeInto(merged, readKubeconfig(path));
    return [merged, `KUBECONFIG (${paths.join(', ')})`];
  }
  const home = process.env.HOME ?? process.env.USERPROFILE;
  if (!home) return undefined;
  const path = `${home}/.kube/config`;
  if (!existsSync(path)) return undefined;
  return [readKubeconfig(path), `kubeconfig ${path}`];
}

/** kube-rs's merge: named entries are appended unless the name exists; the first current-context stays. */
function mergeInto(base: RawKubeconfig, next: RawKubeconfig): void {
  for (const key of ['clusters', 'users', 'contexts'] as const) {
    const names = new Set(base[key].map((e) => e.name));
    for (const entry of next[key]) if (!names.has(entry.name)) (base[key] as unknown[]).push(entry);
  }
  if (base['current-context'] == null) base['current-context'] = next['current-context'];
}

/** One file, every YAML document in it merged; relative paths joined to the file's directory. */
function readKubeconfig(path: string): RawKubeconfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8').replace(/^\uFEFF/, '');
  } catch (err) {
    throw new ConfigError(`kubeconfig ${path}: cannot be read: ${(err as NodeJS.ErrnoException).code ?? describe(err)}`);
  }
  let docs: unknown[];
  try {
    docs = yaml.loadAll(text);
  } catch (err) {
    const mark = (err as { mark?: { line: number; column: number } }).mark;
    throw new ConfigError(
      `kubeconfig ${path}: not a valid kubeconfig (YAML error${mark ? ` at line ${mark.line + 1}, column ${mark.column + 1}` : ''})`,
    );
  }
  const dir = rustParent(path);
  const merged: RawKubeconfig = { clusters: [], users: [], contexts: [] };
  for (const doc of docs) {
    if (doc == null) continue;
    if (typeof doc !== 'object') throw new ConfigError(`kubeconfig ${path}: not a valid kubeconfig (not a mapping)`);
    const d = doc as Partial<RawKubeconfig>;
    const config: RawKubeconfig = {
      clusters: listOf(d.clusters, path, 'clusters'),
      users: listOf(d.users, path, 'users'),
      contexts: listOf(d.contexts, path, 'contexts'),
      'current-context': d['current-context'],
    };
    if (dir !== undefined) {
      for (const c of config.clusters) absolute(c.cluster, 'certificate-authority', dir);
      for (const u of config.users) {
        for (const key of ['client-certificate', 'client-key', 'tokenFile']) absolute(u.user, key, dir);
        const execSection = u.user?.exec as Record<string, unknown> | undefined;
        if (typeof execSection?.command === 'string' && execSection.command.includes('/')) absolute(execSection, 'command', dir);
      }
    }
    mergeInto(merged, config);
  }
  return merged;
}

function listOf<T>(value: unknown, path: string, key: string): T[] {
  if (value == null) return [];
  if (!Array.isArray(value)) throw new ConfigError(`kubeconfig ${path}: not a valid kubeconfig (${key} is not a list)`);
  return value as T[];
}

/** `Path::parent` as kube-rs sees it: the text before the last `/` (`''` for a bare name). */
function rustParent(path: string): string | undefined {
  const trimmed = path.replace(/\/+$/, '');
  if (trimmed === '') return undefined;
  const at = trimmed.lastIndexOf('/');
  return at < 0 ? '' : at === 0 ? '/' : trimmed.slice(0, at);
}

/** `dir.join(file)` for a relative `file`, byte for byte as kube-rs writes it (no normalisation). */
function absolute(section: Record<string, unknown> | undefined, key: string, dir: string): void {
  const file = section?.[key];
  if (typeof file !== 'string' || isAbsolute(file)) return;
  section![key] = dir === '' ? file : dir.endsWith('/') ? `${dir}${file}` : `${dir}/${file}`;
}

function fromKubeconfig(
  kubeconfig: RawKubeconfig,
  origin: string,
  o: KubeConfigProp,
  serverOrigin?: string,
): { resolution: KubernetesResolution; connect: Connection | undefined } {
  let context: string | undefined;
  if (o.context !== undefined) {
    if (!kubeconfig.contexts.some((c) => c.name === o.context)) {
      const known = kubeconfig.contexts.map((c) => `'${c.name}'`);
      throw new ConfigError(
        `${origin}: context '${o.context}' (kubeConfig.context) not found; it defines ${known.length ? `contexts ${known.join(', ')}` : 'no contexts'}`,
      );
    }
    context = o.context;
  } else {
    // kubectl treats an empty current-context as unset.
    context = kubeconfig['current-context'] || undefined;
  }
  if (context === undefined) {
    return { resolution: { origin, serverSource: '', credentials: [], proxyEnvironment: proxyEnvironment() }, connect: undefined };
  }
  const { name: clusterName, cluster } = clusterOf(kubeconfig, context, origin);
  // Overrides go into the kubeconfig itself, so the client and the identity come from the same values.
  if (o.server !== undefined) cluster.server = o.server;
  if (o.skipTLSVerify !== undefined) cluster['insecure-skip-tls-verify'] = o.skipTLSVerify;
  const userName = kubeconfig.contexts.find((c) => c.name === context)?.context?.user;
  const user = kubeconfig.users.find((u) => u.name === userName)?.user ?? {};
  const endpoint: KubernetesEndpoint = withoutUndefined({
    clusterName,
    server: typeof cluster.server === 'string' ? cluster.server : '',
    caData: optionalString(cluster['certificate-authority-data']),
    caFile: optionalString(cluster['certificate-authority']),
    skipTlsVerify: cluster['insecure-skip-tls-verify'] === true,
  });
  const serverSource =
    serverOrigin ??
    (o.server !== undefined
      ? 'kubeConfig.server'
      : o.cluster
        ? 'kubeConfig.cluster.server'
        : `the server of cluster '${clusterName}' in ${origin}`);
  const credentials = credentialKinds(user);
  const kc = new KubeConfig();
  // kubectl and kube-rs spell it `tokenFile`; client-node reads `token-file`.
  const users = kubeconfig.users.map((u) =>
    u.user && typeof u.user.tokenFile === 'string' && u.user['token-file'] === undefined
      ? { ...u, user: { ...u.user, 'token-file': u.user.tokenFile } }
      : u,
  );
  // Entries client-node cannot use (a cluster without a server, ...) are left
  // out rather than failing the load: kube-rs only looks at the selected ones.
  kc.loadFromString(JSON.stringify({ ...kubeconfig, users, 'current-context': context }), { onInvalidEntry: 'filter' });
  return {
    resolution: withoutUndefined({
      endpoint,
      origin,
      serverSource,
      credentials,
      proxyUrl: optionalString(cluster['proxy-url']),
      proxyEnvironment: proxyEnvironment(),
    }),
    connect: connectionTo(endpoint, kc, credentials),
  };
}

function clusterOf(kubeconfig: RawKubeconfig, context: string, origin: string) {
  const ctx = kubeconfig.contexts.find((c) => c.name === context)?.context;
  if (!ctx) throw new ConfigError(`${origin}: context '${context}' is empty`);
  const named = kubeconfig.clusters.find((c) => c.name === ctx.cluster);
  if (!named) throw new ConfigError(`${origin}: context '${context}' names cluster '${ctx.cluster}', which is not defined`);
  if (!named.cluster) throw new ConfigError(`${origin}: cluster '${ctx.cluster}' is empty`);
  return { name: named.name, cluster: named.cluster };
}

function inCluster(o: KubeConfigProp): { resolution: KubernetesResolution; connect: Connection | undefined } {
  const host = process.env.KUBERNETES_SERVICE_HOST;
  const port = process.env.KUBERNETES_SERVICE_PORT;
  if (host === undefined || port === undefined) {
    throw new ConfigError(
      'no Kubernetes configuration found: KUBECONFIG is not set, ~/.kube/config does not exist, and this is not a pod ' +
        '(KUBERNETES_SERVICE_HOST is not set); pass kubeConfig.kubeconfigPath or set KUBECONFIG',
    );
  }
  if (o.context !== undefined) {
    throw new ConfigError(
      `kubeConfig.context '${o.context}' was given, but no kubeconfig was found (running in-cluster, which has no contexts)`,
    );
  }
  const bracketed = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  const endpoint = {
    clusterName: IN_CLUSTER_NAME,
    server: o.server ?? `https://${bracketed}:${port}`,
    caFile: `${SERVICE_ACCOUNT}/ca.crt`,
    skipTlsVerify: o.skipTLSVerify ?? false,
  } satisfies KubernetesEndpoint;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      { name: IN_CLUSTER_NAME, server: endpoint.server, caFile: endpoint.caFile, skipTLSVerify: endpoint.skipTlsVerify },
    ],
    users: [{ name: 'inClusterUser', authProvider: { name: 'tokenFile', config: { tokenFile: `${SERVICE_ACCOUNT}/token` } } }],
    contexts: [{ name: 'inClusterContext', cluster: IN_CLUSTER_NAME, user: 'inClusterUser' }],
    currentContext: 'inClusterContext',
  });
  const credentials = ['a token file'];
  return {
    resolution: {
      endpoint,
      origin: 'the in-cluster configuration',
      serverSource: o.server !== undefined ? 'kubeConfig.server' : 'the in-cluster server (KUBERNETES_SERVICE_HOST)',
      credentials,
      proxyEnvironment: proxyEnvironment(),
    },
    connect: connectionTo(endpoint, kc, credentials),
  };
}

/** The proxy variables that are set, for the addon's choice of proxy. */
function proxyEnvironment(): Record<string, string> {
  const names = ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy', 'NO_PROXY', 'no_proxy'];
  return Object.fromEntries(names.flatMap((name) => (process.env[name] !== undefined ? [[name, process.env[name]]] : [])));
}

/** The kinds of credential a kubeconfig user has, in the native transport's words. */
function credentialKinds(user: Record<string, unknown>): string[] {
  const has = (...keys: string[]) => keys.some((k) => user[k] !== undefined && user[k] !== null);
  const kinds: Array<[boolean, string]> = [
    [has('token'), 'a bearer token'],
    [has('tokenFile', 'token-file'), 'a token file'],
    [has('exec'), 'an exec credential plugin'],
    [has('auth-provider'), 'an auth provider'],
    [has('username', 'password'), 'a user name and password'],
    [has('client-certificate', 'client-certificate-data', 'client-key', 'client-key-data'), 'a client certificate or key'],
  ];
  return kinds.filter(([present]) => present).map(([, kind]) => kind);
}

/**
 * An anonymous `http://` server is reached without client-node, which refuses
 * plain HTTP unless TLS verification is off (meaningless there). With
 * credentials the addon refuses plain HTTP before any request is made.
 */
function connectionTo(endpoint: KubernetesEndpoint, kc: KubeConfig, credentials: string[]): Connection {
  const plain = endpoint.server.toLowerCase().startsWith('http://');
  return {
    server: endpoint.server.replace(/\/+$/, ''),
    clusterName: endpoint.clusterName,
    kubeConfig: plain && credentials.length === 0 ? undefined : kc,
  };
}

const optionalString = (v: unknown) => (typeof v === 'string' ? v : undefined);

/** `o` without its undefined properties: the addon's types mark a missing value as an absent property. */
function withoutUndefined<T extends Record<string, unknown>>(o: T): { [K in keyof T]: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as { [K in keyof T]: Exclude<T[K], undefined> };
}

// ---------------------------------------------------------------------------
// Requests

/** Request options with the user's credentials, TLS material and proxy agent, from client-node. */
async function requestOptions(connection: Connection): Promise<https.RequestOptions> {
  const opts: https.RequestOptions = {};
  if (!connection.kubeConfig) return opts;
  try {
    await connection.kubeConfig.applyToHTTPSOptions(opts);
  } catch (err) {
    // As the native transport does, an authentication failure is not retried (401: Refused).
    throw new RequestFailure({ message: authFailure(err), httpStatus: 401 });
  }
  return opts;
}

/**
 * client-node puts a failed credential plugin's stderr into its error, and a
 * plugin's output is where a token would be: describe, never print.
 */
function authFailure(err: unknown): string {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (code === 'ENOENT' || code === 'EACCES') {
    return `authenticating to the API server failed: a credential file or plugin could not be opened (${code})`;
  }
  return (
    'authenticating to the API server failed: the kubeconfig user\'s credentials could not be obtained ' +
    '(a credential plugin, token file or certificate failed; its output is not shown because it may hold credentials)'
  );
}

class RequestFailure extends Error {
  constructor(readonly failure: KubernetesFailure) {
    super(failure.message);
  }
}

const failureOf = (err: unknown): KubernetesFailure =>
  err instanceof RequestFailure ? err.failure : { message: describe(err) };

function describe(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code;
    return code && !err.message.includes(code) ? `${err.message} (${code})` : err.message;
  }
  return String(err);
}

/** The API's own words from a `Status` body, else what the status line says. */
function statusMessage(status: number | undefined, body: string): string {
  try {
    const parsed = JSON.parse(body) as { message?: unknown; reason?: unknown };
    if (typeof parsed.message === 'string' && parsed.message !== '') return parsed.message;
    if (typeof parsed.reason === 'string' && parsed.reason !== '') return `the API server answered HTTP ${status} (${parsed.reason})`;
  } catch {
    // not a Status
  }
  return `the API server answered HTTP ${status}`;
}

async function listPods(connection: Connection, namespace: string, labelSelector: string): Promise<KubernetesPodList> {
  try {
    const opts = await requestOptions(connection);
    const url = new URL(
      `${connection.server}/api/v1/namespaces/${encodeURIComponent(namespace)}/pods?labelSelector=${encodeURIComponent(labelSelector)}`,
    );
    const { status, body } = await get(url, opts);
    if (status < 200 || status >= 300) {
      return { failure: { message: statusMessage(status, body), httpStatus: status } };
    }
    let list: { items?: unknown[] };
    try {
      list = JSON.parse(body) as { items?: unknown[] };
    } catch {
      return { failure: { message: "the API server's answer to the pod list could not be read (not JSON)" } };
    }
    return { pods: (list.items ?? []).map(podOf) };
  } catch (err) {
    return { failure: failureOf(err) };
  }
}

/**
 * One Lease call (`coordination.k8s.io/v1`): get (none: no `lease`),
 * create, or replace carrying the resourceVersion read, which the API server
 * refuses with 409 when the lease moved on. The lease logic is the addon's.
 */
async function lease(connection: Connection, request: KubernetesLeaseRequest): Promise<KubernetesLeaseOutcome> {
  try {
    const opts = await requestOptions(connection);
    const base = `${connection.server}/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(request.namespace)}/leases`;
    const named = `${base}/${encodeURIComponent(request.name)}`;
    const body =
      request.verb === 'get'
        ? undefined
        : JSON.stringify({
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            metadata: withoutUndefined({ name: request.name, resourceVersion: request.resourceVersion ?? undefined }),
            spec: withoutUndefined({
              holderIdentity: request.spec?.holder ?? undefined,
              leaseDurationSeconds: request.spec?.durationSeconds ?? undefined,
              acquireTime: request.spec?.acquireTime ?? undefined,
              renewTime: request.spec?.renewTime ?? undefined,
              leaseTransitions: request.spec?.transitions ?? undefined,
            }),
          });
    const method = request.verb === 'get' ? 'GET' : request.verb === 'create' ? 'POST' : 'PUT';
    const { status, body: answer } = await get(new URL(request.verb === 'create' ? base : named), opts, method, body);
    if (request.verb === 'get' && status === 404) return {};
    if (status < 200 || status >= 300) return { failure: { message: statusMessage(status, answer), httpStatus: status } };
    let object: { metadata?: { resourceVersion?: string }; spec?: Record<string, unknown> };
    try {
      object = JSON.parse(answer) as typeof object;
    } catch {
      return { failure: { message: "the API server's answer to a lease call could not be read (not JSON)" } };
    }
    const spec = object.spec ?? {};
    const text = (v: unknown) => (typeof v === 'string' ? v : undefined);
    const count = (v: unknown) => (typeof v === 'number' ? v : undefined);
    return {
      lease: withoutUndefined({
        resourceVersion: object.metadata?.resourceVersion,
        holder: text(spec.holderIdentity),
        durationSeconds: count(spec.leaseDurationSeconds),
        acquireTime: text(spec.acquireTime),
        renewTime: text(spec.renewTime),
        transitions: count(spec.leaseTransitions),
      }),
    };
  } catch (err) {
    return { failure: failureOf(err) };
  }
}

/**
 * The most an API answer may hold. A pod list is read whole (it is parsed as
 * one JSON document), so a huge or hostile answer must not grow memory
 * without bound; 32 MiB holds the list of thousands of pods, far more than a
 * ClickHouse installation has.
 */
const MAX_ANSWER_BYTES = 32 * 1024 * 1024;
/** What is kept of a refused exec upgrade's answer: its Status message is at the start. */
const MAX_REFUSAL_BYTES = 64 * 1024;

function get(
  url: URL,
  opts: https.RequestOptions,
  method = 'GET',
  body?: string,
): Promise<{ status: number; body: string }> {
  const client = url.protocol === 'http:' ? http : https;
  const headers = { ...opts.headers, accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }) };
  return new Promise((resolve, reject) => {
    const req = client.request(url, { ...opts, method, headers }, (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_ANSWER_BYTES) {
          // Stops reading at once: the connection is closed, and what was read is dropped.
          const limit = `${MAX_ANSWER_BYTES / (1024 * 1024)} MiB`;
          req.destroy(new Error(`the API server's answer to ${method} ${url.pathname} is larger than ${limit}, so it was not read`));
          return;
        }
        chunks.push(c);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    // The addon bounds the list (30 s); this frees the socket when it gives up.
    req.setTimeout(35_000, () => req.destroy(new Error('the request timed out')));
    req.on('error', reject);
    req.end(body);
  });
}

/** The facts the core reconciles on, read from a pod object. */
function podOf(item: unknown): ExecutorPod {
  const pod = item as {
    metadata?: { name?: string; uid?: string; deletionTimestamp?: string | null };
    spec?: { containers?: Array<{ name?: string }> };
    status?: { phase?: string; conditions?: Array<{ type?: string; status?: string }> };
  };
  return withoutUndefined({
    name: pod.metadata?.name ?? '',
    uid: pod.metadata?.uid,
    ready: (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    phase: pod.status?.phase,
    terminating: pod.metadata?.deletionTimestamp != null,
    containers: (pod.spec?.containers ?? []).map((c) => c.name ?? ''),
  });
}

async function exec(connection: Connection, request: KubernetesExecRequest, open: Set<WebSocket>): Promise<KubernetesExecOutcome> {
  let opts: https.RequestOptions;
  try {
    opts = await requestOptions(connection);
  } catch (err) {
    return { failure: failureOf(err) };
  }
  const query = [
    ...request.command.map((arg) => `command=${encodeURIComponent(arg)}`),
    `container=${encodeURIComponent(request.container)}`,
    'stdin=true',
    'stdout=true',
    'stderr=true',
  ].join('&');
  const base = connection.server.replace(/^http/, 'ws');
  const url = `${base}/api/v1/namespaces/${encodeURIComponent(request.namespace)}/pods/${encodeURIComponent(request.pod)}/exec?${query}`;
  return new Promise<KubernetesExecOutcome>((resolve) => {
    const ws = new WebSocket(url, CHANNEL_PROTOCOLS, { ...(opts as unknown as WebSocketType.ClientOptions), perMessageDeflate: false });
    open.add(ws);
    const stdout = new CappedText(request.maxOutputBytes);
    const stderr = new CappedText(request.maxOutputBytes);
    let settled = false;
    const settle = (outcome: KubernetesExecOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      open.delete(ws);
      resolve(outcome);
    };
    const timer = setTimeout(() => {
      ws.terminate();
      settle({ failure: { message: `the exec did not finish within ${request.timeoutMs} ms` } });
    }, request.timeoutMs);
    ws.on('upgrade', () => undefined);
    ws.on('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        if (size < MAX_REFUSAL_BYTES) chunks.push(c.subarray(0, MAX_REFUSAL_BYTES - size));
        size += c.length;
      });
      res.on('end', () => {
        const status = res.statusCode;
        const message = statusMessage(status, Buffer.concat(chunks).toString('utf8'));
        const failure = withoutUndefined({ message: `the API server refused the exec WebSocket upgrade with HTTP ${status}: ${message}`, httpStatus: status });
        settle({ failure });
        ws.terminate();
      });
    });
    ws.on('open', () => {
      // Written once and never closed: `head -c N` in the command ends the
      // input, and closing stdin would lose the exit status under v4.
      const statement = Buffer.from(request.stdin, 'utf8');
      const frame = Buffer.allocUnsafe(statement.length + 1);
      frame[0] = STDIN;
      statement.copy(frame, 1);
      ws.send(frame);
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      const bytes = isBinary ? data : Buffer.from(data.toString(), 'utf8');
      if (bytes.length === 0) return;
      const channel = bytes[0];
      const payload = bytes.subarray(1);
      if (channel === STDOUT) stdout.push(payload);
      else if (channel === STDERR) stderr.push(payload);
      else if (channel === STATUS) {
        let status: unknown;
        try {
          status = JSON.parse(payload.toString('utf8'));
        } catch {
          status = { status: 'Failure', message: 'the status frame was not JSON' };
        }
        // The status frame ends the exec; a clean close, as kubectl does.
        settle({ stdout: stdout.text(), stderr: stderr.text(), status });
        ws.close(1000);
      }
    });
    ws.on('error', (err) => {
      settle({ stdout: stdout.text(), stderr: stderr.text(), failure: { message: describe(err) } });
      ws.terminate();
    });
    // Closed before the status frame: the outcome is unknown (no `status`).
    ws.on('close', () => settle({ stdout: stdout.text(), stderr: stderr.text() }));
  });
}

/** Keeps at most `cap` bytes of a stream, counting the rest away. */
class CappedText {
  private readonly chunks: Buffer[] = [];
  private kept = 0;
  constructor(private readonly cap: number) {}
  push(chunk: Buffer): void {
    const room = this.cap - this.kept;
    if (room <= 0) return;
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.chunks.push(Buffer.from(part));
    this.kept += part.length;
  }
  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}
