// Where a Node test file runs its sandbox. A fixed directory per file, so
// scripts/test.sh can stop every sandbox even when a test process is killed
// before its own teardown; under TEST_SANDBOX_ROOT when that is set, so the
// test command can run its native and WebAssembly passes side by side, each
// with directories of its own (the instances are claimed per sandbox anyway).
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** The sandbox directory of the test file called `name`. */
export function sandboxDir(name) {
  return join(process.env.TEST_SANDBOX_ROOT || root, `.sandbox-${name}`);
}
