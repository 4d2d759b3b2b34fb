// A pod's statement list in one exec (execMode 'perPod', the default): its script puts
// `SELECT '<24 hex>:<n>' FORMAT TabSeparated;` before statement n and the same with `end` after the last
// (crates/core/src/reconcile/batch.rs), and the live-schema check's script follows that when the
// exec runs the check too (its own client, after the statements succeeded). These helpers read such a script from the sandbox's exec log
// the way the demo and the tests count what ran: statement by statement. They parse the script's
// text; they do not reuse the product's code.

/** `{ nonce, statements, check }` when `stdin` is a batch script, else undefined (`check`: the
 * check's script after the end marker, '' without one). */
export function batchStatements(stdin) {
  const marker = (line) => /^SELECT '([0-9a-f]{24}):(\d+|end)' FORMAT TabSeparated;$/.exec(line);
  const lines = stdin.split(/(?<=\n)/);
  const first = lines.length > 0 ? marker(lines[0].replace(/\n$/, '')) : null;
  if (!first || first[2] !== '0') return undefined;
  const nonce = first[1];
  const statements = [];
  let current = '';
  let check;
  for (const line of lines.slice(1)) {
    if (check !== undefined) {
      check += line;
      continue;
    }
    const m = marker(line.replace(/\n$/, ''));
    if (m && m[1] === nonce) {
      statements.push(current.endsWith('\n;\n') ? current.slice(0, -3) : current.replace(/\n$/, ''));
      current = '';
      if (m[2] === 'end') check = '';
    } else {
      current += line;
    }
  }
  return { nonce, statements, check: check ?? '' };
}

/**
 * The sandbox's exec log with each batch exec spread into one entry per statement, and one for the
 * check after them (each keeps the exec's other fields and gains `batch`, the exec's id), so a test
 * reads which statements ran where.
 */
export function statementLog(execs) {
  return execs.flatMap((e) => {
    const batch = batchStatements(e.stdin);
    if (!batch) return [e];
    const parts = batch.check ? [...batch.statements, batch.check] : batch.statements;
    return parts.map((stdin) => ({ ...e, stdin, batch: e.id }));
  });
}
