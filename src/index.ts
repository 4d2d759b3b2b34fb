/**
 * Package entry point. Everything here forwards to the native addon; the rules
 * (validation, fingerprint, redaction) live in Rust so that they are the same
 * for every caller.
 */
import * as binding from '../index.js';

export type { ClickHouseSchemaError, ClickHouseSchemaErrorCode, ConfigIssue } from './errors.js';
export { isClickHouseSchemaError } from './errors.js';
export type { RedactedOutput } from '../index.js';

/**
 * Validates props for the resource `id` and returns them with every default
 * applied. Throws a `ClickHouseSchemaError` with `code: 'E_INVALID_CONFIG'`
 * whose `issues` list every problem.
 */
export function validateConfig(id: string, props: unknown): Record<string, unknown> {
  return binding.validateConfig(id, props) as Record<string, unknown>;
}

/** sha256 hex over what is applied; validates first and throws like `validateConfig`. */
export function fingerprint(props: unknown, id?: string): string {
  return binding.fingerprint(props, id);
}

/**
 * Redacts clickhouse-client output produced by `statement`: the statement and
 * its literals never survive, the ClickHouse code and exception class do.
 */
export function redactClickHouseOutput(output: string, statement: string): binding.RedactedOutput {
  return binding.redactClickHouseOutput(output, statement);
}

export type {
  ApplyResult,
  ClickHouseExecutor,
  ExecutorExecRequest,
  ExecutorExecResult,
  ExecutorPod,
  PlanResult,
  SchemaState,
} from '../index.js';

/**
 * Brings the cluster to `props` for resource `id` and resolves to the state to
 * record (`changed: false` and the previous state when nothing had to run).
 * Rejects with a `ClickHouseSchemaError`; record nothing then.
 */
export function apply(
  id: string,
  props: unknown,
  previousState?: binding.SchemaState,
  executor?: binding.ClickHouseExecutor,
): Promise<binding.ApplyResult> {
  return binding.apply(id, props, previousState ?? null, executor ?? null);
}

/**
 * Would `apply` run anything? Makes only the calls of apply's no-op check (one
 * pod list under fanout, none under onCluster) and runs no statement.
 */
export function plan(
  id: string,
  props: unknown,
  previousState?: binding.SchemaState,
  executor?: binding.ClickHouseExecutor,
): Promise<binding.PlanResult> {
  return binding.plan(id, props, previousState ?? null, executor ?? null);
}

/** Deletes resource `id` per its `onDelete` (`retain` never reaches the cluster). */
export function destroy(
  id: string,
  props: unknown,
  state?: binding.SchemaState,
  executor?: binding.ClickHouseExecutor,
): Promise<void> {
  return binding.destroy(id, props, state ?? null, executor ?? null);
}

// The Alchemy resource and provider, and the props' types generated from
// schema/props.schema.json (ClickHouseSchemaProps and its parts).
export type * from './generated/props.js';
export type { ClickHouseSchemaInput } from './provider.js';
export { ClickHouseSchema, clickHouseSchema, clickHouseSchemaProvider } from './provider.js';
