/**
 * Deploying and destroying a Stack from a script on Node 20, without the
 * `alchemy` CLI (which needs Node 22.15+): the layers the CLI would provide.
 * Used by examples/run.mjs, the demo and the end-to-end tests.
 *
 * Alchemy's local state goes under `process.cwd()` as it is at the first
 * import of alchemy: `.alchemy/state/<stack>/<stage>/`.
 */
import { deploy } from 'alchemy/Deploy';
import { destroy } from 'alchemy/Destroy';
import * as Drift from 'alchemy/Drift';
import { localState } from 'alchemy/State';
import { LoggingCli } from 'alchemy/Cli/LoggingCli';
import * as Interaction from 'alchemy/Interaction';
import { AlchemyContextLive } from 'alchemy/AlchemyContext';
import { PlatformServices } from 'alchemy/Util/PlatformServices';
import * as Effect from 'effect/Effect';
import * as Layer from 'effect/Layer';

const runtime = Layer.mergeAll(LoggingCli, Interaction.layerNonInteractive(), AlchemyContextLive).pipe(
  Layer.provideMerge(PlatformServices),
);

type DeployableStack = Parameters<typeof deploy>[0]['stack'];

/**
 * Runs an Alchemy program with the runtime layers. A failure rejects with the
 * provider's own error object (a ClickHouseSchemaError keeps every property).
 * Aborting `signal` interrupts the program as Ctrl-C interrupts the CLI's; the
 * promise settles once the interruption is done (the provider's calls have
 * stopped and released their leases).
 */
const run = <A>(program: Effect.Effect<A, unknown, unknown>, signal?: AbortSignal): Promise<A> =>
  Effect.runPromise(
    program.pipe(Effect.provide(runtime), Effect.scoped) as Effect.Effect<A, unknown, never>,
    { signal },
  );

/** Deploys `stack` to `stage`; resolves to the stack's outputs. `signal` interrupts it. */
export const deployStack = (stack: unknown, stage = 'dev', options: { signal?: AbortSignal } = {}): Promise<unknown> =>
  run(deploy({ stack: stack as DeployableStack, stage }) as Effect.Effect<unknown, unknown, unknown>, options.signal);

/** Destroys every resource of `stack` in `stage`. `signal` interrupts it. */
export const destroyStack = (stack: unknown, stage = 'dev', options: { signal?: AbortSignal } = {}): Promise<unknown> =>
  run(destroy({ stack: stack as DeployableStack, stage }) as Effect.Effect<unknown, unknown, unknown>, options.signal);

/**
 * `alchemy drift` for `stack` in `stage` (locally recorded state): detects,
 * or with `repair` reconciles, every resource whose provider's `read` sees the
 * cloud differ from what was recorded. `providers` is the stack's providers
 * Layer. Resolves to Alchemy's per-resource result (`unchanged`, `drifted`,
 * `repaired`, ...).
 */
export const driftStack = (
  name: string,
  stage: string,
  providers: Layer.Layer<never, never, never>,
  repair = false,
): Promise<Drift.DriftResult> =>
  run(
    (repair ? Drift.repair({ name, stage }) : Drift.detect({ name, stage })).pipe(
      Effect.provide(Layer.mergeAll(providers, localState())),
    ) as Effect.Effect<Drift.DriftResult, unknown, unknown>,
  );
