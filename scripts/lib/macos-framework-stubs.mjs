// Writes text stubs (.tbd) for the Apple frameworks the addon links on macOS, for a cross build
// with zig, which carries the macOS libc (libSystem) but no framework: <out>/<Name>.framework/<Name>.tbd.
// Each stub names the framework's install path on macOS and exports every function and static that
// the crate binding it (security-framework-sys, core-foundation-sys) declares in its extern blocks;
// the linker records them as imports from that framework, as a link against Apple's SDK does.
//
//   node scripts/lib/macos-framework-stubs.mjs <out dir>    (run from the repository root)
import { execFileSync } from 'node:child_process'
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
const out = process.argv[2]
const meta = JSON.parse(execFileSync('cargo', ['metadata', '--format-version', '1', '--locked',
  '--filter-platform', 'aarch64-apple-darwin', '--manifest-path', 'crates/napi/Cargo.toml'],
  { encoding: 'utf8', maxBuffer: 64 << 20 }))
const resolved = new Set(meta.resolve.nodes.map((n) => n.id))
const frameworks = { 'security-framework-sys': 'Security', 'core-foundation-sys': 'CoreFoundation' }
const rsFiles = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? rsFiles(join(dir, e.name)) : e.name.endsWith('.rs') ? [join(dir, e.name)] : [])
for (const p of meta.packages) {
  const name = frameworks[p.name]
  if (!name || !resolved.has(p.id)) continue
  const symbols = new Set()
  for (const file of rsFiles(join(p.manifest_path, '..', 'src'))) {
    const src = readFileSync(file, 'utf8')
    for (const block of src.matchAll(/extern\s+"C"\s*\{([\s\S]*?)\n\}/g)) {
      for (const m of block[1].matchAll(/pub\s+(?:fn|static(?:\s+mut)?)\s+(\w+)/g)) symbols.add(`_${m[1]}`)
    }
  }
  const fwDir = join(out, `${name}.framework`)
  mkdirSync(fwDir, { recursive: true })
  const archs = '[ x86_64-macos, arm64-macos ]'
  writeFileSync(join(fwDir, `${name}.tbd`), [
    '--- !tapi-tbd', 'tbd-version:     4', `targets:         ${archs}`,
    `install-name:    '/System/Library/Frameworks/${name}.framework/Versions/A/${name}'`,
    'exports:', `  - targets:         ${archs}`,
    `    symbols:         [ ${[...symbols].sort().join(', ')} ]`, '...', ''].join('\n'))
  console.error(`${name}.framework stub: ${symbols.size} symbols from ${p.name} ${p.version}`)
}
