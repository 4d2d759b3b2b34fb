// Tests' side of a pod's script (see scripts/lib/batch-script.mjs, which reads one): an injected
// executor that answers a script statement by statement, as both clients run it.
export { batchStatements, statementLog } from '../../scripts/lib/batch-script.mjs';

/** What the pod's shell prints between a batch's statements and its check (crates/core/src/command.rs). */
const STATEMENTS_ENDED_LABEL = 'clickhouse-schema-statements-ended';

/**
 * An executor's `exec` that runs a batch as both clients do: each statement's marker, then the
 * statement (`onStatement` answers it as it answers an exec of its own: an output, undefined for
 * success, or a rejection that ends the whole exec in transport), stopping at the first that fails;
 * the end marker after the last, then the live-schema check's script when the batch carries one
 * (answered by `onStatement` too), behind the shell's label. `record` is called with each statement's request as it is sent.
 */
export async function runBatch(request, batch, onStatement, record = () => {}) {
  let stdout = '';
  for (const [index, statement] of batch.statements.entries()) {
    stdout += `${batch.nonce}:${index}\n`;
    const one = { ...request, stdin: statement };
    record(one);
    const output = (await onStatement(one)) ?? { stdout: '', stderr: '', exitCode: 0 };
    stdout += output.stdout ?? '';
    if (output.exitCode !== 0) return { ...output, stdout };
  }
  stdout += `${batch.nonce}:end\n`;
  if (!batch.check) return { stdout, stderr: '', exitCode: 0 };
  // The live-schema check after them, behind the shell's label; its status is the exec's.
  const one = { ...request, stdin: batch.check };
  record(one);
  const output = (await onStatement(one)) ?? { stdout: '', stderr: '', exitCode: 0 };
  return { ...output, stdout: `${stdout}${STATEMENTS_ENDED_LABEL}\n${output.stdout ?? ''}` };
}
