// Tests' side of a pod's script (see scripts/lib/batch-script.mjs, which reads one): an injected
// executor that answers a script statement by statement, as both clients run it.
export { batchStatements, statementLog } from '../../scripts/lib/batch-script.mjs';

/** What the pod's shell prints between a batch's statements and its check (crates/core/src/command.rs). */
const STATEMENTS_ENDED_LABEL = 'clickhouse-schema-statements-ended';

/**
 * An executor's `exec` that runs a batch as both clients do: the ledger's opening row when it
 * carries one, each statement's marker, then the statement (`onStatement` answers each as it
 * answers an exec of its own: an output, undefined for success, or a rejection that ends the whole
 * exec in transport), stopping at the first that fails; the end marker after the last, the
 * ledger's closing row and its marker, then the live-schema check's script behind the shell's
 * label. `record` is called with each request as it is sent.
 */
export async function runBatch(request, batch, onStatement, record = () => {}) {
  let stdout = '';
  const answer = async (stdin) => {
    const one = { ...request, stdin };
    record(one);
    return (await onStatement(one)) ?? { stdout: '', stderr: '', exitCode: 0 };
  };
  // The ledger's rows run as the statements do: a failure ends the script there.
  if (batch.opening) {
    const output = await answer(batch.opening);
    if (output.exitCode !== 0) return output;
  }
  for (const [index, statement] of batch.statements.entries()) {
    stdout += `${batch.nonce}:${index}\n`;
    const output = await answer(statement);
    stdout += output.stdout ?? '';
    if (output.exitCode !== 0) return { ...output, stdout };
  }
  stdout += `${batch.nonce}:end\n`;
  if (batch.closing) {
    const output = await answer(batch.closing);
    if (output.exitCode !== 0) return { ...output, stdout };
    stdout += `${batch.nonce}:closed\n`;
  }
  if (!batch.check) return { stdout, stderr: '', exitCode: 0 };
  // The live-schema check after them, behind the shell's label (on stdout and on stderr); the
  // exec's status is then 0, whatever the check's client exits.
  const output = await answer(batch.check);
  return {
    stdout: `${stdout}${STATEMENTS_ENDED_LABEL}\n${output.stdout ?? ''}`,
    stderr: `${STATEMENTS_ENDED_LABEL}\n${output.stderr ?? ''}`,
    exitCode: 0,
  };
}
