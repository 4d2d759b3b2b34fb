// Which build of the addon a test run is meant to exercise. scripts/test.sh
// runs the Node tests twice: natively, then with NAPI_RS_FORCE_WASI=error,
// which makes the generated loader load the WebAssembly build or fail. Each
// test file asserts the build it actually got, so a silent fallback to the
// native addon cannot pass for a WebAssembly run.
import { test } from 'node:test';
import assert from 'node:assert/strict';

export const expectedTarget = process.env.NAPI_RS_FORCE_WASI ? 'wasm32-wasi' : 'native';

/** Registers the check in the calling test file. */
export function assertsTheAddonBuild(addonTarget) {
  test(`the addon under test is the ${expectedTarget} build`, () => {
    assert.equal(addonTarget, expectedTarget);
  });
}
