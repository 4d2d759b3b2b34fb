// A release of this repository staged the way `npm publish` would see it, in a
// scratch directory so the working tree is left as it is: the main package's
// shipped files (from `npm pack`), the per-platform packages of npm/ with the
// binaries built into them (npm run build:all, build:wasm), then
// `napi pre-publish --skip-optional-publish --no-gh-release` (npm run
// prepack:platforms), which writes the main package's optionalDependencies and
// checks every platform package, and finally `npm pack` of each.
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

function run(cmd, args, cwd) {
  return execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 });
}

function pack(dir, into) {
  const [info] = JSON.parse(run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', into], dir));
  return join(into, info.filename);
}

/**
 * Stages and packs the release in `work`.
 * @returns {{ main: { tarball: string, manifest: object }, platforms: Map<string, string> }}
 *   the main tarball and its package.json as released, and each platform's tarball by npm/ directory.
 */
export function packRelease(work) {
  const stage = join(work, 'release');
  const tarballs = join(work, 'tarballs');
  mkdirSync(stage, { recursive: true });
  mkdirSync(tarballs, { recursive: true });

  // Exactly what the main package ships, plus npm/ (which it does not ship).
  run('tar', ['-xzf', pack(root, work), '-C', stage, '--strip-components=1'], root);
  cpSync(join(root, 'npm'), join(stage, 'npm'), { recursive: true });
  run(join(root, 'node_modules', '.bin', 'napi'), ['pre-publish', '--skip-optional-publish', '--no-gh-release'], stage);

  const manifest = JSON.parse(readFileSync(join(stage, 'package.json'), 'utf8'));
  const platforms = new Map();
  for (const dir of readdirSync(join(stage, 'npm'))) {
    platforms.set(dir, pack(join(stage, 'npm', dir), tarballs));
  }
  return { main: { tarball: pack(stage, tarballs), manifest }, platforms };
}
