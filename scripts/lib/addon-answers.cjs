// What scripts/check-arm64.sh and scripts/check-windows.sh compare between a
// cross-built binary and the x86_64 Linux one: the answers of the pure
// functions (fingerprint, validation with its defaults, warnings, and the error
// of an invalid config) as one JSON line. Equal lines mean the build computes
// what the reference build computes.
module.exports = function answers(addon) {
  const props = {
    target: { namespace: 'example-observability', podSelector: { app: 'clickhouse' } },
    statements: ['CREATE DATABASE IF NOT EXISTS orders'],
  };
  let invalid;
  try {
    addon.validateConfig('orders-schema', { statements: [] });
  } catch (e) {
    invalid = { code: e.code, message: e.message };
  }
  return JSON.stringify({
    fingerprint: addon.fingerprint(props, 'orders-schema'),
    validateConfig: addon.validateConfig('orders-schema', props),
    configWarnings: addon.configWarnings('orders-schema', props),
    invalid,
  });
};
