// A pod's statement list in one exec (execMode 'perPod', the default): its script puts
// `SELECT '<24 hex>:<n>' FORMAT TabSeparated;` before statement n and the same with `end` after the last
// (crates/core/src/reconcile/batch.rs); the ledger's rows come before the first marker and after
// the end marker (with a `closed` marker of their own), and the live-schema check's script last
// (its own client, after the statements succeeded). These helpers read such a script from the
// sandbox's exec log the way the demo and the tests count what ran: statement by statement. They
// parse the script's text; they do not reuse the product's code.

/**
 * `{ nonce, statements, opening, closing, check }` when `stdin` is a batch script, else undefined:
 * `opening`, the ledger's opening row's script before the first marker ('' without one);
 * `closing`, its closing row's script after the end marker, up to the `closed` marker ('' without
 * one); `check`, the live-schema check's script after all that ('' without one).
 */
export function batchStatements(stdin) {
  const marker = (line) => /^SELECT '([0-9a-f]{24}):(\d+|end|closed)' FORMAT TabSeparated;$/.exec(line);
  const lines = stdin.split(/(?<=\n)/);
  const first = lines.findIndex((l) => marker(l.replace(/\n$/, ''))?.[2] === '0');
  if (first < 0) return undefined;
  const nonce = marker(lines[first].replace(/\n$/, ''))[1];
  const opening = lines.slice(0, first).join('');
  const statements = [];
  let current = '';
  let after;
  let closing = '';
  for (const line of lines.slice(first + 1)) {
    const m = marker(line.replace(/\n$/, ''));
    const ours = m && m[1] === nonce;
    if (after !== undefined) {
      if (ours && m[2] === 'closed') {
        closing = after;
        after = '';
      } else {
        after += line;
      }
      continue;
    }
    if (ours) {
      statements.push(current.endsWith('\n;\n') ? current.slice(0, -3) : current.replace(/\n$/, ''));
      current = '';
      if (m[2] === 'end') after = '';
    } else {
      current += line;
    }
  }
  return { nonce, statements, opening, closing, check: after ?? '' };
}

/**
 * The sandbox's exec log with each batch exec spread into one entry per statement, and one for each
 * ledger row and the check around them (each keeps the exec's other fields and gains `batch`, the exec's id), so a test
 * reads which statements ran where.
 */
export function statementLog(execs) {
  return execs.flatMap((e) => {
    const batch = batchStatements(e.stdin);
    if (!batch) return [e];
    const some = (part) => (part ? [part] : []);
    const parts = [...some(batch.opening), ...batch.statements, ...some(batch.closing), ...some(batch.check)];
    return parts.map((stdin) => ({ ...e, stdin, batch: e.id }));
  });
}
