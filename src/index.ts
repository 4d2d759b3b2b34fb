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
