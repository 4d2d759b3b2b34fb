/**
 * The shape of every error the addon throws. The addon builds these as real
 * `Error` objects (so stack traces and `instanceof Error` work); this module
 * only declares their properties for TypeScript and offers a type guard.
 */

/** Stable machine codes; existing values never change meaning. */
export type ClickHouseSchemaErrorCode =
  | 'E_INVALID_CONFIG'
  | 'E_STATEMENT_FAILED'
  | 'E_TRANSPORT'
  | 'E_KUBERNETES_API'
  | 'E_PODS_NOT_READY'
  | 'E_CONTAINER_MISSING'
  | 'E_POD_SET_UNSTABLE'
  | 'E_CLUSTER_MISMATCH'
  | 'E_NOTHING_APPLIED'
  | 'E_INVALID_STATE'
  | 'E_INTERNAL';

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
}

export function isClickHouseSchemaError(value: unknown): value is ClickHouseSchemaError {
  return (
    value instanceof Error &&
    value.name === 'ClickHouseSchemaError' &&
    (value as { _tag?: unknown })._tag === 'ClickHouseSchemaError' &&
    typeof (value as { code?: unknown }).code === 'string'
  );
}
