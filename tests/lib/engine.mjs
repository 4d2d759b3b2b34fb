// Which ClickHouse the sandbox pods of this test process run, and test functions whose names say
// it. The test command runs the suites that talk to ClickHouse once per engine
// (scripts/test.sh): SANDBOX_ENGINE=modern gives pods of the 26.9 engine (chdb-core behind a
// stand-in client, crates/sandbox-hosts/src/modern.rs), unset the 18.16 servers. The sandbox
// binary reads SANDBOX_ENGINE itself, so every startSandbox of the process follows it.
import * as nodeTest from 'node:test';

/** `26.9` or `18.16`. */
export const engine = ['modern', '26.9'].includes(process.env.SANDBOX_ENGINE ?? '') ? '26.9' : '18.16';

/** Whether the pods run the modern engine. */
export const modern = engine === '26.9';

const named = (name) => `${name} [${engine}]`;

// node:test's functions, with the engine appended to every name; options and bodies unchanged.
const wrap = (fn) => (name, ...rest) => fn(named(name), ...rest);
export const test = wrap(nodeTest.test);
export const describe = wrap(nodeTest.describe);
export const { before, after, beforeEach, afterEach } = nodeTest;

/**
 * A test that needs what only the 18.16 servers have (replication of inserts, ON CLUSTER's
 * distributed DDL queue): it runs in the 18.16 pass, named for it and for `why`, and is not
 * registered in the modern pass (the modern engine has no server to run it on; README says so).
 */
export function test1816(why, name, ...rest) {
  if (modern) return undefined;
  return nodeTest.test(`${name} [18.16 only: ${why}]`, ...rest);
}
