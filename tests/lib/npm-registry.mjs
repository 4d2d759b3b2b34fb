// A local npm registry for the install test: it serves this repository's packed
// tarballs (the main package and every platform package) as if they were
// published, and forwards every other request to the upstream registry. With it
// a fresh project runs the command README gives, `npm install
// alchemy-clickhouse-schema`, and npm itself chooses the platform package from
// the main package's optionalDependencies and each one's os/cpu/libc, which a
// tarball named on the command line would bypass.
//
// Only what npm needs to install is implemented: GET of a packument
// (`/<name>`, `/@scope%2f<name>`) and of a tarball. Nothing is published to,
// or cached by, the upstream registry.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { basename } from 'node:path';
import { execFileSync } from 'node:child_process';

/** The package.json inside a tarball (npm packs it as package/package.json). */
function manifestOf(tarball) {
  return JSON.parse(execFileSync('tar', ['-xOzf', tarball, 'package/package.json'], { encoding: 'utf8' }));
}

/**
 * Starts the registry on a free loopback port.
 * @param {string[]} tarballs packed packages to serve as published
 * @param {string} upstream the registry everything else comes from
 * @returns {Promise<{ url: string, requested: Set<string>, close: () => Promise<void> }>}
 *   `requested` holds the names of the served packages npm asked for.
 */
export async function startRegistry(tarballs, upstream = 'https://registry.npmjs.org/') {
  const local = new Map();
  for (const file of tarballs) {
    const manifest = manifestOf(file);
    const bytes = readFileSync(file);
    local.set(manifest.name, { manifest, bytes, file: basename(file) });
  }
  const requested = new Set();
  let base = '';

  const server = createServer(async (req, res) => {
    try {
      const path = decodeURIComponent(new URL(req.url, 'http://x').pathname).replace(/^\/+/, '');
      // `<name>/-/<file>.tgz` is a tarball; anything else names a package.
      const [name, file] = path.includes('/-/') ? path.split('/-/') : [path, null];
      const pkg = local.get(name);
      if (pkg && file === null) {
        requested.add(name);
        const { manifest, bytes } = pkg;
        const version = {
          ...manifest,
          _id: `${manifest.name}@${manifest.version}`,
          dist: {
            tarball: `${base}/${manifest.name}/-/${pkg.file}`,
            integrity: `sha512-${createHash('sha512').update(bytes).digest('base64')}`,
            shasum: createHash('sha1').update(bytes).digest('hex'),
          },
        };
        const body = JSON.stringify({
          name: manifest.name,
          'dist-tags': { latest: manifest.version },
          versions: { [manifest.version]: version },
        });
        res.writeHead(200, { 'content-type': 'application/json' }).end(body);
        return;
      }
      if (pkg && file === pkg.file) {
        res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(pkg.bytes);
        return;
      }
      // Everything else is the upstream registry's: same path, same Accept.
      const upstreamRes = await fetch(new URL(req.url.replace(/^\/+/, ''), upstream), {
        headers: { accept: req.headers.accept ?? '*/*' },
      });
      const body = Buffer.from(await upstreamRes.arrayBuffer());
      res.writeHead(upstreamRes.status, {
        'content-type': upstreamRes.headers.get('content-type') ?? 'application/octet-stream',
      });
      res.end(body);
    } catch (e) {
      res.writeHead(502, { 'content-type': 'text/plain' }).end(String(e));
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${server.address().port}`;
  return {
    url: `${base}/`,
    requested,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
