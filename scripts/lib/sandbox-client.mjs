// The one JavaScript client of the sandbox (crates/sandbox): start and stop
// it, call its control API, and query a pod's ClickHouse the way an operator
// would, with kubectl exec. Used by the Node tests, the demo and the benchmark.
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
// The release build (npm run sandbox:start, the demo, the benchmark), or the
// one SANDBOX_BIN names: scripts/test.sh uses the dev build its Rust tests share.
export const sandboxBin = process.env.SANDBOX_BIN || join(root, 'target/release/sandbox');

/** Stops whatever sandbox runs from `dir`; quiet when none does. */
export function stopSandbox(dir) {
  spawnSync(sandboxBin, ['stop', '--dir', dir], { encoding: 'utf8' });
}

/**
 * Starts a fresh sandbox from `dir` (stopping and wiping any previous one):
 * `layout` is a number of pods in one shard, or replicas per shard ('2,2');
 * `engine` ('18.16' or 'modern') overrides SANDBOX_ENGINE, which the sandbox
 * binary reads when it is not given.
 */
export function startSandbox(dir, layout = 3, { engine } = {}) {
  stopSandbox(dir);
  rmSync(dir, { recursive: true, force: true });
  const size = typeof layout === 'number' ? ['--pods', String(layout)] : ['--layout', layout];
  const pick = engine ? ['--engine', engine] : [];
  const started = spawnSync(sandboxBin, ['start', '--dir', dir, ...size, ...pick], { encoding: 'utf8' });
  if (started.status !== 0) throw new Error(`sandbox start failed:\n${started.stdout}\n${started.stderr}`);
  return openSandbox(dir);
}

/** A handle on the sandbox running from `dir`. */
export function openSandbox(dir) {
  const info = JSON.parse(readFileSync(join(dir, 'sandbox.json'), 'utf8'));
  const kubeconfig = join(dir, 'kubeconfig');
  const caData = /certificate-authority-data:\s*(\S+)/.exec(readFileSync(kubeconfig, 'utf8'));
  const ca = Buffer.from(caData[1], 'base64');

  /** Calls the control API with the admin token; resolves to the JSON reply. */
  function control(method, path, body) {
    return new Promise((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: info.port,
          method,
          path,
          ca,
          headers: { authorization: `Bearer ${info.tokens.admin}`, 'content-type': 'application/json' },
        },
        (res) => {
          let text = '';
          res.on('data', (c) => (text += c));
          res.on('end', () =>
            res.statusCode < 300
              ? resolve(text ? JSON.parse(text) : null)
              : reject(new Error(`${method} ${path}: ${res.statusCode} ${text}`)),
          );
        },
      );
      req.on('error', reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  }

  /** Runs `sql` on `pod` with kubectl exec; returns trimmed stdout. */
  function query(pod, sql) {
    const r = spawnSync(
      'kubectl',
      ['--kubeconfig', kubeconfig, 'exec', '-i', pod, '-c', 'clickhouse', '--', 'sh', '-c', 'clickhouse-client --password "$CLICKHOUSE_PASSWORD"'],
      { input: sql, encoding: 'utf8' },
    );
    if (r.status !== 0) throw new Error(`query on ${pod} failed: ${r.stderr}`);
    return r.stdout.trim();
  }

  /**
   * `query` without blocking the event loop: for a test that watches a pod while a deploy runs in
   * the same process (the WebAssembly addon's Kubernetes calls, lease renewals among them, are
   * made by JavaScript on this event loop, so a synchronous query would hold them back).
   */
  function queryAsync(pod, sql) {
    return new Promise((resolve, reject) => {
      const child = spawn(
        'kubectl',
        ['--kubeconfig', kubeconfig, 'exec', '-i', pod, '-c', 'clickhouse', '--', 'sh', '-c', 'clickhouse-client --password "$CLICKHOUSE_PASSWORD"'],
        { stdio: ['pipe', 'pipe', 'pipe'] },
      );
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c) => (stdout += c));
      child.stderr.on('data', (c) => (stderr += c));
      child.on('error', reject);
      child.on('close', (status) =>
        status === 0 ? resolve(stdout.trim()) : reject(new Error(`query on ${pod} failed: ${stderr}`)),
      );
      child.stdin.end(sql);
    });
  }

  /** Table names in `database` on `pod`, sorted. */
  function tablesOn(pod, database) {
    return query(pod, `SELECT name FROM system.tables WHERE database = '${database}' ORDER BY name`)
      .split('\n')
      .filter(Boolean);
  }

  const clearLogs = async () => {
    await control('DELETE', '/sandbox/exec-log');
    await control('DELETE', '/sandbox/api-log');
  };

  return { dir, info, kubeconfig, control, query, queryAsync, tablesOn, clearLogs };
}
