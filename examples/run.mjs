#!/usr/bin/env node
// Deploys or destroys an example stack with Alchemy, from Node 20 (no CLI):
//
//   npm run build:ts   # compiles src/ and examples/ (to dist/examples/)
//   SANDBOX_KUBECONFIG=.sandbox-demo/kubeconfig node examples/run.mjs quickstart deploy
//   SANDBOX_KUBECONFIG=.sandbox-demo/kubeconfig node examples/run.mjs full destroy
//
// Alchemy's state goes to ./.alchemy/state/<stack>/dev/ under the current directory.
const [example, action] = process.argv.slice(2);
if (!['quickstart', 'full'].includes(example) || !['deploy', 'destroy'].includes(action)) {
  console.error('usage: node examples/run.mjs quickstart|full deploy|destroy');
  process.exit(2);
}
const { deployStack, destroyStack } = await import('../dist/examples/runtime.js');
const { stack } = await import(`../dist/examples/${example}/stack.js`);
try {
  const outputs = await (action === 'deploy' ? deployStack(stack) : destroyStack(stack));
  if (action === 'deploy') console.log(JSON.stringify(outputs, null, 2));
} catch (error) {
  console.dir(error, { depth: 6 });
  process.exit(1);
}
