// A writer that inserts into a live table the way an application does while a deploy runs, for
// the rebuild tests under traffic. One loop per pod, each insert acknowledged (the client exited
// 0) or failed; only acknowledged rows go into the log the tests compare the tables with. The
// rows come from a seeded generator, so a failing seed can be replayed:
// - most are dated now (the servers' clock is this machine's);
// - of the others, one in ten is dated two to five days ahead (scheduled events, a skewed
//   producer), one in ten twenty days back (a late arrival, into a partition copied long ago);
// - now and then a batch repeats a row of the last minutes acknowledged earlier, exactly (tables
//   without a unique key hold such rows, and a rebuild must keep both).
// Columns: (id UInt64, kind String, at DateTime, v Int64).

import assert from 'node:assert/strict';
import { modern } from './engine.mjs';

export const DAY = 86_400;

/** A small seeded generator (mulberry32): numbers in [0, 1). */
export function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The rows of `table` on `pod` as sorted TSV lines `id, kind, at (unix seconds), v`. */
export function rowsOf(sandbox, pod, table) {
  return sandbox
    .query(pod, `SELECT id, kind, toUnixTimestamp(at), v FROM ${table} ORDER BY id, kind, at, v FORMAT TSV`)
    .split('\n')
    .filter(Boolean);
}

/**
 * Runs `body(writer)` with a writer inserting into `table` on every pod, and stops the writer
 * however `body` ends; returns `{ written, failed }` (see `startWriter`).
 */
export async function withWriter(sandbox, pods, table, options, body) {
  const writer = startWriter(sandbox, pods, table, options);
  try {
    await body(writer);
  } finally {
    await writer.stop();
  }
  return writer.stop();
}

// The pause between one pod's inserts. Each insert on a 26.9 pod starts the engine in a process
// of its own (about a CPU-second), so a writer pausing 40 ms there would keep both cores of the
// test machine busy and starve the apply it is meant to run beside; it still writes throughout.
const defaultPauseMs = modern ? 400 : 40;

/**
 * Starts inserting into `table` on every pod of `pods`, a batch of `batch` rows (three) at a time, until
 * `stop()`. `until(predicate)` waits for a condition on the writer (never a fixed delay);
 * `stop()` waits for the inserts under way and returns `{ written: Map(pod -> TSV lines),
 * failed: [messages] }`.
 */
export function startWriter(sandbox, pods, table, { seed, pauseMs = defaultPauseMs, maxMs = 660_000, batch = 3 }) {
  const random = seeded(seed);
  const written = new Map(pods.map((p) => [p, []]));
  const failed = [];
  let stopping = false;
  let next = 5_000_000 + seed * 100_000;
  let acknowledged = 0;
  const waiters = new Set();
  const api = { acknowledged: () => acknowledged };
  const wake = () => {
    for (const w of waiters) if (w.predicate(api)) (waiters.delete(w), w.resolve());
  };
  // Bounded in time whatever happens to the test (just over the longest test timeout, 600 s on
  // the 26.9 engine): a loop left running would keep the test process alive and write into the
  // next sandbox that takes this one's instance.
  const deadline = Date.now() + maxMs;
  const loop = async (pod, index) => {
    while (!stopping && Date.now() < deadline) {
      const now = Math.floor(Date.now() / 1000);
      const rows = [];
      for (let i = 0; i < batch; i++) {
        // The first row of a batch is always dated now, so that no two batches' rows of one
        // partition are alike: a Replicated table drops an insert whose block equals an earlier
        // one (its deduplication), which is ClickHouse's doing, not the rebuild's.
        const r = i === 0 ? 1 : random();
        const at = r < 0.1 ? now + (2 + Math.floor(random() * 4)) * DAY + i : r < 0.2 ? now - 20 * DAY - i : now;
        rows.push(`${next++}\tw${index}\t${at}\t${Math.floor(random() * 1000)}`);
      }
      const log = written.get(pod);
      const recent = log.filter((line) => Math.abs(Number(line.split('\t')[2]) - now) < 600);
      if (recent.length > 0 && random() < 0.15) rows.push(recent[Math.floor(random() * recent.length)]);
      const values = rows
        .map((line) => line.split('\t'))
        .map(([id, kind, at, v]) => `(${id}, '${kind}', toDateTime(${at}), ${v})`)
        .join(', ');
      try {
        await sandbox.queryAsync(pod, `INSERT INTO ${table} VALUES ${values}`);
        log.push(...rows);
        acknowledged += 1;
      } catch (err) {
        failed.push(`${pod}: ${String(err.message).slice(0, 300)}`);
      }
      wake();
      await new Promise((r) => setTimeout(r, pauseMs));
    }
  };
  const loops = pods.map((pod, i) => loop(pod, i));
  // A wait the writer can no longer satisfy (its time bound passed) fails, rather than leave a
  // promise pending that nothing keeps the event loop alive for.
  const ended = Promise.all(loops).then(() => {
    for (const w of waiters) {
      waiters.delete(w);
      w.reject(new Error(`the writer stopped (after ${maxMs} ms, or stop()) before it got there; ${acknowledged} inserts acknowledged`));
    }
  });
  return {
    acknowledged: () => acknowledged,
    until(predicate, timeoutMs = 60_000) {
      if (predicate(api)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const w = { predicate, resolve, reject };
        waiters.add(w);
        setTimeout(() => {
          if (waiters.delete(w)) reject(new Error(`the writer did not get there within ${timeoutMs} ms (failed: ${failed.join('; ')})`));
        }, timeoutMs).unref();
      });
    },
    async stop() {
      stopping = true;
      await Promise.all(loops);
      await ended;
      return { written, failed };
    },
  };
}

/** Asserts that `rows` (sorted TSV lines) are exactly `expected`, naming what is missing or extra. */
export function sameRows(found, expected, what) {
  const count = (list) => list.reduce((m, r) => m.set(r, (m.get(r) ?? 0) + 1), new Map());
  const f = count(found);
  const e = count(expected);
  const missing = [...e].filter(([r, n]) => (f.get(r) ?? 0) < n).map(([r, n]) => `${r} (${n - (f.get(r) ?? 0)}x of ${n})`);
  const extra = [...f].filter(([r, n]) => (e.get(r) ?? 0) < n).map(([r, n]) => `${r} (${n - (e.get(r) ?? 0)}x)`);
  assert.deepEqual(
    { missing: missing.slice(0, 10), extra: extra.slice(0, 10), counts: [found.length, expected.length] },
    { missing: [], extra: [], counts: [expected.length, expected.length] },
    what,
  );
}

/**
 * Asserts that no insert failed, but for one race of 18.16: an insert that starts in the instant the
 * rebuild drops its view (at the swap) fails with code 60 naming that view before it writes
 * anything (the rows check then proves none of its rows landed), and the application retries it.
 */
export function noInsertFailed(failed) {
  const other = failed.filter((f) => !/Code: 60\. .*Table \w+\.\w+__rebuild_view doesn't exist/.test(f));
  assert.deepEqual(other, [], 'no insert failed during the rebuild');
  assert.ok(failed.length <= 2, `at most an insert or two met the view's drop: ${failed.join('; ')}`);
}
