// Checks the per-platform packages that `npm run build:all` fills (npm/<platform>/): each declared
// target has exactly one binary, and its header says the operating system's format and the CPU the
// directory names (read by hand: ELF, Mach-O, PE, WASM). A missing binary fails the test.
// It also checks what `npm pack` would ship (no binary in the main package, exactly one in each
// platform package) and runs publint on the main package and on every platform package.
//
//   npm run build:all && npm run build:wasm && node --test tests/binaries.test.mjs
import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseTriple } from '@napi-rs/cli'
import { publint } from 'publint'
import { formatMessage } from 'publint/utils'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
const { binaryName, targets: triples } = pkg.napi
const targets = triples.map((triple) => parseTriple(triple))
const isWasm = (target) => target.arch === 'wasm32'
const artifactName = (target) => `${binaryName}.${target.platformArchABI}.${isWasm(target) ? 'wasm' : 'node'}`
const packageDir = (target) => join(root, 'npm', target.platformArchABI)
const buildHint = (target) =>
  isWasm(target) ? 'build it with `npm run build:wasm`' : 'build it with `npm run build:all` (scripts/build-all.sh)'

// ---- header readers -------------------------------------------------------------------------------

const ELF_MACHINE = { x64: 62, arm64: 183 }
const MACHO_CPU = { x64: 0x01000007, arm64: 0x0100000c }
const PE_MACHINE = { x64: 0x8664, arm64: 0xaa64 }

/** The shared libraries an ELF file names in DT_NEEDED (64-bit little-endian only). */
function elfNeeded(buf) {
  const phoff = Number(buf.readBigUInt64LE(32))
  const phentsize = buf.readUInt16LE(54)
  const phnum = buf.readUInt16LE(56)
  const loads = []
  let dynamic = null
  for (let i = 0; i < phnum; i++) {
    const ph = phoff + i * phentsize
    const type = buf.readUInt32LE(ph)
    const segment = {
      offset: Number(buf.readBigUInt64LE(ph + 8)),
      vaddr: Number(buf.readBigUInt64LE(ph + 16)),
      filesz: Number(buf.readBigUInt64LE(ph + 32)),
    }
    if (type === 1) loads.push(segment) // PT_LOAD
    if (type === 2) dynamic = segment // PT_DYNAMIC
  }
  assert.ok(dynamic, 'ELF file has no PT_DYNAMIC segment')
  const toOffset = (vaddr) => {
    const load = loads.find((l) => vaddr >= l.vaddr && vaddr < l.vaddr + l.filesz)
    assert.ok(load, `address 0x${vaddr.toString(16)} is in no PT_LOAD segment`)
    return vaddr - load.vaddr + load.offset
  }
  const needed = []
  let strtab = null
  for (let at = dynamic.offset; at < dynamic.offset + dynamic.filesz; at += 16) {
    const tag = Number(buf.readBigInt64LE(at))
    const value = Number(buf.readBigUInt64LE(at + 8))
    if (tag === 0) break // DT_NULL
    if (tag === 1) needed.push(value) // DT_NEEDED
    if (tag === 5) strtab = toOffset(value) // DT_STRTAB
  }
  assert.ok(strtab !== null, 'ELF file has no DT_STRTAB')
  return needed.map((offset) => {
    const start = strtab + offset
    return buf.toString('latin1', start, buf.indexOf(0, start))
  })
}

function checkElf(buf, target) {
  assert.equal(buf.toString('latin1', 0, 4), '\x7fELF', 'ELF magic')
  assert.equal(buf[4], 2, 'ELF class: 64-bit (ELFCLASS64)')
  assert.equal(buf[5], 1, 'ELF data: little-endian')
  assert.equal(buf.readUInt16LE(16), 3, 'ELF type: shared object (ET_DYN)')
  assert.equal(buf.readUInt16LE(18), ELF_MACHINE[target.arch], `ELF e_machine for ${target.arch}`)
  const needed = elfNeeded(buf)
  if (target.abi === 'gnu') {
    assert.ok(needed.includes('libc.so.6'), `a glibc build needs libc.so.6; DT_NEEDED: ${needed.join(', ')}`)
  } else if (target.abi === 'musl') {
    assert.ok(needed.includes('libc.so'), `a musl build needs musl's libc.so; DT_NEEDED: ${needed.join(', ')}`)
    assert.ok(!needed.some((n) => /^lib(c|pthread|dl|m)\.so\.\d/.test(n)), `a musl build needs no glibc library; DT_NEEDED: ${needed.join(', ')}`)
  }
}

function checkMachO(buf, target) {
  assert.equal(buf.readUInt32LE(0), 0xfeedfacf, 'Mach-O 64-bit magic (MH_MAGIC_64)')
  assert.equal(buf.readUInt32LE(4), MACHO_CPU[target.arch], `Mach-O cputype for ${target.arch}`)
  const filetype = buf.readUInt32LE(12)
  assert.ok(filetype === 6 || filetype === 8, `Mach-O filetype is a dylib (6) or bundle (8), got ${filetype}`)
}

function checkPe(buf, target) {
  assert.equal(buf.toString('latin1', 0, 2), 'MZ', 'DOS header magic')
  const pe = buf.readUInt32LE(0x3c)
  assert.equal(buf.toString('latin1', pe, pe + 4), 'PE\0\0', 'PE signature')
  assert.equal(buf.readUInt16LE(pe + 4), PE_MACHINE[target.arch], `PE machine for ${target.arch}`)
  assert.ok(buf.readUInt16LE(pe + 22) & 0x2000, 'PE characteristics: IMAGE_FILE_DLL')
  assert.equal(buf.readUInt16LE(pe + 24), 0x20b, 'PE optional header: PE32+')
}

function checkWasm(buf) {
  assert.equal(buf.toString('latin1', 0, 4), '\0asm', 'WASM magic')
  assert.equal(buf.readUInt32LE(4), 1, 'WASM binary version')
}

const CHECKS = { linux: checkElf, darwin: checkMachO, win32: checkPe, wasi: checkWasm }

// ---- per-target binaries --------------------------------------------------------------------------

for (const target of targets) {
  const file = join(packageDir(target), artifactName(target))
  const label = `${target.platformArchABI} (${target.triple})`
  const present = existsSync(file)

  test(`${label}: ${artifactName(target)} matches its platform`, () => {
    assert.ok(existsSync(packageDir(target)), `npm/${target.platformArchABI} does not exist: run \`napi create-npm-dirs\``)
    assert.ok(present, `${file} is missing: ${buildHint(target)}`)
    const check = CHECKS[target.platform]
    assert.ok(check, `no header check for platform ${target.platform}`)
    check(readFileSync(file), target)
  })

  test(`${label}: package.json names the binary and the platform`, () => {
    const manifest = JSON.parse(readFileSync(join(packageDir(target), 'package.json'), 'utf8'))
    assert.equal(manifest.name, `${pkg.napi.packageName}-${target.platformArchABI}`)
    assert.equal(manifest.version, pkg.version)
    assert.ok(manifest.files.includes(artifactName(target)), `files lists ${artifactName(target)}`)
    if (!isWasm(target)) {
      assert.equal(manifest.main, artifactName(target))
      assert.deepEqual(manifest.os, [target.platform])
      assert.deepEqual(manifest.cpu, [target.arch])
    }
    if (target.platform !== 'linux') {
      // npm refuses (EBADPLATFORM) a package with a libc field on any OS but Linux.
      assert.equal(manifest.libc, undefined, `npm/${target.platformArchABI}/package.json must not declare libc`)
    }
  })
}

// The main package's optionalDependencies are written at release time by `npm run prepack:platforms`
// (napi pre-publish, never publishing): committed before the platform packages are on the registry,
// they would put package.json out of step with package-lock.json and `npm ci` would refuse to run.
// tests/install.test.mjs checks them on the staged release.
test('package.json in the repository declares no optionalDependencies (a release writes them)', () => {
  assert.equal(pkg.optionalDependencies, undefined)
})

test('no npm/ directory holds a binary for an undeclared target, and each holds at most one', () => {
  const declared = new Set(targets.map((t) => t.platformArchABI))
  for (const dir of readdirSync(join(root, 'npm'))) {
    const binaries = readdirSync(join(root, 'npm', dir)).filter((f) => /\.(node|wasm)$/.test(f))
    if (binaries.length === 0) continue
    assert.ok(declared.has(dir), `npm/${dir} holds ${binaries.join(', ')} but package.json napi.targets does not declare it`)
    assert.equal(binaries.length, 1, `npm/${dir} holds ${binaries.join(', ')}`)
  }
})

// ---- what npm pack ships --------------------------------------------------------------------------

// One real `npm pack` per package (a cross-check binary is tens of MB to compress), shared by the
// content checks below and publint, which lints the same tarball.
const packDir = mkdtempSync(join(tmpdir(), 'ch-schema-pack-'))
after(() => rmSync(packDir, { recursive: true, force: true }))
const packs = new Map()
function packed(dir) {
  if (!packs.has(dir)) {
    const out = execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', packDir], {
      cwd: dir,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    const [result] = JSON.parse(out)
    packs.set(dir, { files: result.files.map((f) => f.path), tarball: join(packDir, result.filename) })
  }
  return packs.get(dir)
}
const packedFiles = (dir) => packed(dir).files

test('npm pack of the main package ships no native binary', () => {
  const files = packedFiles(root)
  assert.deepEqual(files.filter((f) => /\.(node|wasm)$/.test(f)), [])
  assert.ok(files.includes('index.js') && files.includes('index.d.ts'), 'ships the generated loader')
})

for (const target of targets) {
  const present = existsSync(join(packageDir(target), artifactName(target)))
  test(`npm pack of npm/${target.platformArchABI} ships exactly its one binary`, () => {
    assert.ok(present, `${artifactName(target)} is missing: ${buildHint(target)}`)
    const binaries = packedFiles(packageDir(target)).filter((f) => /\.(node|wasm)$/.test(f))
    assert.deepEqual(binaries, [artifactName(target)])
  })
}

// ---- publint --------------------------------------------------------------------------------------

async function lint(dir) {
  const tarball = readFileSync(packed(dir).tarball)
  const pack = { tarball: tarball.buffer.slice(tarball.byteOffset, tarball.byteOffset + tarball.byteLength) }
  // A tarball's files are under package/.
  const { messages, pkg: manifest } = await publint({ pkgDir: 'package', level: 'warning', pack })
  return messages.map((m) => `${m.type}: ${formatMessage(m, manifest)}`)
}

test('publint: the main package', async () => {
  // publint checks that every entry point exists, and the main one is the TypeScript build.
  if (!existsSync(join(root, 'dist', 'index.js'))) {
    execFileSync('npm', ['run', '--silent', 'build:ts'], { cwd: root, stdio: 'inherit' })
  }
  assert.deepEqual(await lint(root), [])
})

for (const target of targets) {
  const present = existsSync(join(packageDir(target), artifactName(target)))
  test(`publint: npm/${target.platformArchABI}`, async () => {
    assert.ok(present, `${artifactName(target)} is missing: ${buildHint(target)}`)
    assert.deepEqual(await lint(packageDir(target)), [])
  })
}
