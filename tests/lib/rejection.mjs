// The one way the Node tests wait for an addon call to fail: it must reject,
// and with a ClickHouseSchemaError (anything else is a bug worth a stack).
import assert from 'node:assert/strict';

import { isClickHouseSchemaError } from '../../dist/index.js';

/** Resolves to the ClickHouseSchemaError `promise` rejects with; fails the test otherwise. */
export async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    assert.ok(isClickHouseSchemaError(err), `expected a ClickHouseSchemaError, got ${err?.stack ?? err}`);
    return err;
  }
  assert.fail('expected a rejection');
}
