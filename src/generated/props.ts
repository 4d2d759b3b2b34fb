/* Generated from schema/props.schema.json by json-schema-to-typescript (npm run generate:types). Do not edit. */

/**
 * DDL statements, applied in order, one clickhouse-client invocation each. Every statement must be idempotent (IF NOT EXISTS, IF EXISTS, ...) because a changed fingerprint re-runs the whole list. Under execution.mode 'onCluster' each must carry ON CLUSTER <cluster>.
 *
 * @minItems 1
 */
export type ClickHouseSchemaStatements = [string, ...string[]];
/**
 * How the DDL reaches every server. 'fanout' (default) runs the list on every matching pod; 'onCluster' runs it once and relies on each statement's ON CLUSTER clause to distribute it through Keeper.
 */
export type ClickHouseSchemaExecution = ClickHouseSchemaFanoutExecution | ClickHouseSchemaOnClusterExecution;
/**
 * What destroying the resource does. 'retain' (default) leaves every database, table and row in place; 'run' executes deleteStatements, which is then required.
 */
export type ClickHouseSchemaOnDelete = "retain" | "run";
/**
 * What happens after the statements ran on a pod: every object they declare (database, table, view, materialized view, dictionary) is looked up on that pod and its definition compared with the declared one, as the server itself prints both. 'fail' (default) fails the apply with E_SCHEMA_MISMATCH and records nothing; 'warn' reports the mismatch through options.onEvent (the provider logs it) and records the apply; 'off' skips the check. Not part of the fingerprint.
 */
export type ClickHouseSchemaVerify = "fail" | "warn" | "off";
/**
 * Statements run in order when the resource is destroyed. Required when onDelete is 'run' and not allowed otherwise.
 *
 * @minItems 1
 */
export type ClickHouseSchemaDeleteStatements = [string, ...string[]];
/**
 * How the statements reach a pod. 'perPod' (default): one exec per pod runs the whole list as one script, stopping at the first statement that fails, whose error still names its index; an exec costs 100-300 ms of API server, kubelet and client start on a real cluster, so this is the fast way. 'perStatement': one exec per statement, for clusters whose exec policy limits stdin, or to debug. A list holding an INSERT with its data in the text (VALUES, FORMAT) runs per statement either way. Not part of the fingerprint.
 */
export type ClickHouseSchemaExecMode = "perPod" | "perStatement";
/**
 * Serialize applies and destroys of this resource across processes (a laptop and CI, two CI jobs) with a coordination.k8s.io/v1 Lease in the target namespace, named from the resource id. true takes it with the defaults; { ttlSeconds } sets how long a holder that stops renewing keeps it (default 60). Taken only when something has to run, renewed while held, released at the end; a deploy that finds it held waits within waitForPod.timeoutMs, then fails with E_LEASE_HELD. Needs get, create and update on leases. Off by default; not part of the fingerprint.
 */
export type ClickHouseSchemaLease =
  | boolean
  | {
      /**
       * Seconds a holder keeps the lease without renewing it (renewed every third of it). 5 to 3600; default 60.
       */
      ttlSeconds?: number;
    };
/**
 * What the apply does when the live-schema check finds a declared object different from its declaration after the statements ran. 'off' (default): nothing, the check decides as today. 'additive': the declaration is the schema; on each pod where an object differs only in ways an ALTER can make, the ALTERs run (a declared column the table lacks is added at its declared place; a column's DEFAULT, COMMENT or CODEC, the table's SETTINGS and COMMENT, skip indexes and projections are modified, added, materialized or dropped; a TTL no longer declared is removed; an ORDER BY that only appends new columns is modified with them; a changed plain view is replaced), then the check verifies. A column the table has and the declaration lacks is kept and reported, never dropped; a column's type change is refused unless allowTypeChange names it; a new or changed TTL (the table's or a column's) is refused, naming its ALTER, since it would delete rows already in the table; anything else (the engine, PARTITION BY, another ORDER BY) is left to the rebuild prop or fails as without convergence. Needs verify 'fail' or 'warn'. Not part of the fingerprint.
 */
export type ClickHouseSchemaConverge = "off" | "additive";
/**
 * Columns whose type convergence may change, as 'database.table.column'. A type change is a mutation: the server rewrites the column in every part of the table, which takes time and disk in proportion to the table. Only with converge 'additive'. Not part of the fingerprint.
 *
 * @maxItems 1000
 */
export type ClickHouseSchemaAllowTypeChange = string[];
/**
 * Which cluster to talk to. Omit to use the ambient kubeconfig (KUBECONFIG or ~/.kube/config, current context). Either kubeconfig options, or an Alchemy Kubernetes connection: Kubernetes.KubeConfig(...), a Kubernetes.Connection, or a cluster resource whose attributes carry one as `connection` (AWS.EKS.Cluster). Recorded with the props (delete needs it), so it never holds a credential; not in the outputs and not part of the fingerprint.
 */
export type ClickHouseSchemaKubeConfig =
  SerializableKubeConfigOptions | AlchemyKubernetesConnection | AlchemyClusterLike;

/**
 * Props of a ClickHouseSchema resource: which ClickHouse server pods to reach, which DDL to apply to them, and how. Cross-field rules (onDelete/deleteStatements, ON CLUSTER under execution.mode 'onCluster') are described on the fields they involve and enforced by the native validator.
 */
export interface ClickHouseSchemaProps {
  target: ClickHouseSchemaTarget;
  client?: ClickHouseSchemaClient;
  statements: ClickHouseSchemaStatements;
  execution?: ClickHouseSchemaExecution;
  settings?: ClickHouseSchemaSettings;
  onDelete?: ClickHouseSchemaOnDelete;
  verify?: ClickHouseSchemaVerify;
  deleteStatements?: ClickHouseSchemaDeleteStatements;
  waitForPod?: ClickHouseSchemaWaitForPod;
  /**
   * fanout only: how many apply passes may chase pods that appeared mid-apply before the converge fails. At most 100.
   */
  maxReconcilePasses?: number;
  /**
   * fanout only: how many pods are applied at once (each pod's statements always run in order, one at a time). On the first failure no pod starts its statements any more, and under execMode 'perStatement' no new statement starts on any pod; what already runs finishes (under 'perPod', a pod's script runs to its end or its own first failure). At most 256. Not part of the fingerprint.
   */
  parallelism?: number;
  execMode?: ClickHouseSchemaExecMode;
  /**
   * Per-statement exec timeout in milliseconds. At most 86400000 (24 hours).
   */
  statementTimeoutMs?: number;
  /**
   * Largest statement (or delete statement) accepted, in UTF-8 bytes. Defaults to 16777216 (16 MiB); at most 1073741824 (1 GiB). Not part of the fingerprint.
   */
  maxStatementBytes?: number;
  retry?: ClickHouseSchemaRetry;
  lease?: ClickHouseSchemaLease;
  ledger?: ClickHouseSchemaLedger;
  rebuild?: ClickHouseSchemaRebuild;
  converge?: ClickHouseSchemaConverge;
  allowTypeChange?: ClickHouseSchemaAllowTypeChange;
  kubeConfig?: ClickHouseSchemaKubeConfig;
  /**
   * Ordering-only input: pass an Output derived from the ClickHouse instance so Alchemy deploys it first. Only the resolved boolean is persisted; it is not part of the fingerprint.
   */
  readyBarrier?: boolean;
}
/**
 * Where the server pods are. Re-pointing the target re-applies the DDL there even when the statements are unchanged.
 */
export interface ClickHouseSchemaTarget {
  /**
   * Kubernetes namespace holding the ClickHouse server pods (a DNS-1123 label).
   */
  namespace: string;
  podSelector: ClickHouseSchemaPodSelector;
  /**
   * Name of the ClickHouse server container inside each pod (a DNS-1123 label).
   */
  container?: string;
}
/**
 * Label selector (matchLabels semantics) for the ClickHouse server pods. Keys and values must be valid Kubernetes label keys and values. Under execution.mode 'fanout' every matching pod receives the statements, so the selector must match server pods only.
 */
export interface ClickHouseSchemaPodSelector {
  /**
   * This interface was referenced by `ClickHouseSchemaPodSelector`'s JSON-Schema definition
   * via the `patternProperty` "^(?:(?=[^/]{1,253}/)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$".
   */
  [k: string]: string;
}
/**
 * How clickhouse-client connects inside the server container. There is deliberately no password field: the password is read inside the pod from the environment variable named by passwordEnv.
 */
export interface ClickHouseSchemaClient {
  /**
   * ClickHouse user the statements run as.
   */
  user?: string;
  /**
   * Database selected for the session (clickhouse-client --database).
   */
  database?: string;
  /**
   * Name of the environment variable, inside the server container, that holds the password. An unset variable means an empty password.
   */
  passwordEnv?: string;
  /**
   * ClickHouse native protocol port inside the pod.
   */
  port?: number;
}
/**
 * Run the ordered statements on every server pod matching the selector, one pod after another.
 */
export interface ClickHouseSchemaFanoutExecution {
  mode: "fanout";
}
/**
 * Run the statements once, on one Ready pod; every statement must carry ON CLUSTER naming exactly this cluster.
 */
export interface ClickHouseSchemaOnClusterExecution {
  mode: "onCluster";
  /**
   * Cluster name as configured in the server's remote_servers section.
   */
  cluster: string;
}
/**
 * ClickHouse settings passed to every statement as --<name>=<value>. Names are lowercase identifiers; values are strings or finite numbers. Names clickhouse-client reads as its own options (host, query, format, server_logs_file, ...), abbreviations of them and param_* names are refused. Unless set here, max_execution_time is statementTimeoutMs rounded up to seconds.
 */
export interface ClickHouseSchemaSettings {
  /**
   * This interface was referenced by `ClickHouseSchemaSettings`'s JSON-Schema definition
   * via the `patternProperty` "^[a-z_][a-z0-9_]*$".
   */
  [k: string]: string | number;
}
/**
 * Readiness budget.
 */
export interface ClickHouseSchemaWaitForPod {
  /**
   * Milliseconds the pods the execution model needs may take to become Ready; under fanout it also bounds the whole reconcile loop. At most 86400000 (24 hours).
   */
  timeoutMs?: number;
}
/**
 * Retries of transport failures only (WebSocket errors, resets, exec timeouts). A statement ClickHouse rejected is never retried.
 */
export interface ClickHouseSchemaRetry {
  /**
   * Total attempts per exec, the first included. Between 1 and 20.
   */
  maxAttempts?: number;
  /**
   * Milliseconds to wait between attempts. Between 0 and 600000 (10 minutes).
   */
  backoffMs?: number;
}
/**
 * Keep a ledger on every pod: after a pod's statements succeed, a row (resource id, fingerprint, statement count, pod name and uid, time, package version) goes into a MergeTree table the apply creates if needed. A deploy whose Alchemy state was lost then records the pods whose ledger holds the current fingerprint instead of running the statements again, `read` adopts such a schema, and status() shows which pods are behind. Its writes are not schema statements. Off by default; not part of the fingerprint.
 */
export interface ClickHouseSchemaLedger {
  /**
   * Database holding the ledger table (created if needed).
   */
  database: string;
  /**
   * Ledger table name.
   */
  table?: string;
}
/**
 * Tables this resource may rebuild, by `database.table`. When the live-schema check finds that such a table differs from its declaration in a way no ALTER can change (ORDER BY beyond new trailing columns, PARTITION BY, PRIMARY KEY, SAMPLE BY, the engine), the apply rebuilds it on every pod that holds its rows, under the lease when there is one: it creates `<table>__new` from the declaration, copies rows written from a cut-over on through a materialized view, copies the rows before it partition by partition with a receipt for each (so a rerun resumes), verifies every partition, and swaps the two tables with one RENAME, keeping the old one as `<table>__old` unless keepOld is false. Without an entry such a difference fails the apply and the message names this prop. Not part of the fingerprint.
 */
export interface ClickHouseSchemaRebuild {
  [k: string]: ClickHouseSchemaRebuildTable;
}
/**
 * This interface was referenced by `ClickHouseSchemaRebuild`'s JSON-Schema definition
 * via the `patternProperty` "^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$".
 */
export interface ClickHouseSchemaRebuildTable {
  /**
   * A DateTime or integer column of the table (in the live table and in the declaration). Rows whose value is at or after the cut-over reach the new table through a materialized view as they are written; the rows before it are copied partition by partition. For a DateTime column the cut-over is the server's time plus cutoverDelaySeconds; for an integer column, one more than its largest value.
   */
  cutoverColumn: string;
  /**
   * Keep the old table as `<table>__old` after the swap (default true); false drops it once the new table serves.
   */
  keepOld?: boolean;
  /**
   * What is compared per partition before the swap: 'count' (row counts, the default) or 'checksum' (row counts and a checksum of every column both tables have, which reads every row twice).
   */
  verify?: "count" | "checksum";
  /**
   * For a DateTime cut-over column: how far in the future the cut-over is set, so that the view is in place on every pod before rows at the cut-over arrive. 1 to 3600; default 10.
   */
  cutoverDelaySeconds?: number;
}
/**
 * Kubeconfig options: a kubeconfig file, a context, server and TLS overrides, or an inline cluster and user whose credentials are files. Only credential-free fields are accepted: tokens, client certificates and keys are referenced by file or come from the kubeconfig itself.
 */
export interface SerializableKubeConfigOptions {
  /**
   * Path to a kubeconfig file on the machine running the converge, instead of the default locations.
   */
  kubeconfigPath?: string;
  /**
   * Load the ambient kubeconfig first (the default when neither kubeconfigPath nor cluster is given).
   */
  loadFromDefault?: boolean;
  /**
   * Context to use instead of the kubeconfig's current-context.
   */
  context?: string;
  /**
   * API server URL overriding the selected cluster's. The selected user's credentials (token, client certificate, exec plugin) are sent to this URL, so it redirects the ambient credentials: name only an API server you trust. Credentials are never sent to an http:// URL.
   */
  server?: string;
  /**
   * Disable TLS verification of the API server. Development clusters only.
   */
  skipTLSVerify?: boolean;
  cluster?: SerializableKubeCluster;
  user?: SerializableKubeUser;
}
/**
 * A complete cluster entry, used instead of the kubeconfig's.
 */
export interface SerializableKubeCluster {
  name: string;
  server: string;
  skipTLSVerify?: boolean;
  /**
   * Base64-encoded PEM CA bundle.
   */
  caData?: string;
  /**
   * Path to a PEM CA bundle.
   */
  caFile?: string;
}
/**
 * A user entry whose credentials are files on the machine running the converge. Inline token, certData and keyData are refused so no credential is carried in props.
 */
export interface SerializableKubeUser {
  name: string;
  certFile?: string;
  keyFile?: string;
}
/**
 * Alchemy's Kubernetes.Connection, as Kubernetes.KubeConfig(...) or a cluster resource builds it. The provider resolves it at call time through the cluster adapter registered for auth.kind (Kubernetes.providers() registers kubeconfig and exec; a cloud's providers register theirs, such as aws-eks): the endpoint, CA and short-lived token it yields are used for that call only and never recorded.
 */
export interface AlchemyKubernetesConnection {
  /**
   * API server URL; optional when the adapter discovers it.
   */
  endpoint?: string;
  /**
   * Base64-encoded PEM CA bundle of the endpoint.
   */
  certificateAuthorityData?: string;
  /**
   * Skip TLS verification of the endpoint (development clusters only).
   */
  insecureSkipTlsVerify?: boolean;
  auth: AlchemyKubernetesAuth;
  [k: string]: unknown;
}
/**
 * How to authenticate; kind selects the cluster adapter. The kinds 'token' and 'client-cert' carry the credential itself and are refused, since Alchemy stores props in its state.
 */
export interface AlchemyKubernetesAuth {
  kind: string;
  [k: string]: unknown;
}
/**
 * A value carrying an Alchemy Kubernetes connection as `connection`, such as a cluster resource; its other attributes are ignored.
 */
export interface AlchemyClusterLike {
  connection: AlchemyKubernetesConnection;
  [k: string]: unknown;
}
