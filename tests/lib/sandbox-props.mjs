// The props every sandbox test starts from: the sandbox's server pods, its
// kubeconfig, and quick retries, so a test that expects a failure gets it fast.

/** Props for `statements` on the pods of `sandbox`, with `extra` on top. */
export function sandboxProps(sandbox, statements, extra = {}) {
  return {
    target: { namespace: 'sandbox', podSelector: { 'clickhouse.altinity.com/chi': 'sandbox' } },
    statements,
    kubeConfig: { kubeconfigPath: sandbox.kubeconfig },
    retry: { maxAttempts: 2, backoffMs: 100 },
    ...extra,
  };
}
