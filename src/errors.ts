/**
 * The shape of every error the addon throws. The addon builds these as real
 * `Error` objects (so stack traces and `instanceof Error` work); this module
 * only declares their properties for TypeScript and offers a type guard.
 */

import type { DifferenceReport, ClickHouseSchemaErrorCode as GeneratedCode } from '../index.js';

/**
 * Stable machine codes; existing values never change meaning. The union of
 * the values of the enum generated from Rust into `index.d.ts`, so this file
 * never lists them.
 */
export type ClickHouseSchemaErrorCode = `${GeneratedCode}`;

/** One problem found in the props. */
export interface ConfigIssue {
  /** Field path as written in the props, e.g. `client.port` or `statements[1]`. */
  readonly path: string;
  readonly reason: string;
}

export interface ClickHouseSchemaError extends Error {
  readonly name: 'ClickHouseSchemaError';
  /** The same as `name`, so Effect's `catchTag('ClickHouseSchemaError', ...)` matches it. */
  readonly _tag: 'ClickHouseSchemaError';
  readonly code: ClickHouseSchemaErrorCode;
  readonly resourceId?: string;
  readonly statementIndex?: number;
  readonly pod?: string;
  readonly clickHouseCode?: number;
  readonly clickHouseException?: string;
  readonly exitCode?: number;
  /** Present on `E_INVALID_CONFIG` and `E_INVALID_STATE`: every problem, not only the first. */
  readonly issues?: readonly ConfigIssue[];
  /** Present on `E_SCHEMA_MISMATCH`: the object that is missing or differs (`database.name`). */
  readonly object?: string;
  /** Present on `E_SCHEMA_MISMATCH`: its parts that differ, redacted (empty when it is missing). */
  readonly differences?: readonly DifferenceReport[];
}

export function isClickHouseSchemaError(value: unknown): value is ClickHouseSchemaError {
  return (
    value instanceof Error &&
    value.name === 'ClickHouseSchemaError' &&
    (value as { _tag?: unknown })._tag === 'ClickHouseSchemaError' &&
    typeof (value as { code?: unknown }).code === 'string'
  );
}
