#!/usr/bin/env node
// The file-level module graph of Rust crates: an edge A -> B when module A
// names something of module B through a `crate::`, `super::` or `self::` path
// (in a `use`, or in code), through a child module's name, or through a module
// a `use` brought into scope. A parent declaring `mod x;` is no edge.
//
// Why: a circle of imports means no file of it can be read, changed or tested
// without all the others, and the layers ("floors") say how deep a reader must
// go. This prints, per crate, the floors (the longest chain of the graph whose
// circles are each taken as one node) and every circle (each strongly connected
// set of files, with the names that tie it), and exits 1 if any crate has one.
//
// Choices: test code is left out (`#[cfg(test)]` items, and the files of
// `#[cfg(test)] mod x;`): a test may reach anywhere, the layering is the
// shipping code's. Comments and string literals are left out (doc links are no
// imports). An inline module counts as part of its file. A `main.rs` beside a
// `lib.rs` is another crate (it reaches the library by name) and is skipped.
//
// Usage: node scripts/lib/module-graph.mjs <crate>/src [<crate>/src ...]
import { readFileSync, readdirSync, statSync, existsSync } from 'node:fs';
import { join, relative, sep } from 'node:path';

// Source text without comments and without the contents of literals.
function strip(src) {
  let out = '';
  for (let i = 0; i < src.length; ) {
    const c = src[i], n = src[i + 1];
    if (c === '/' && n === '/') { while (i < src.length && src[i] !== '\n') i++; }
    else if (c === '/' && n === '*') {
      let depth = 0;
      do {
        if (src.startsWith('/*', i)) { depth++; i += 2; }
        else if (src.startsWith('*/', i)) { depth--; i += 2; }
        else i++;
      } while (depth > 0 && i < src.length);
      out += ' ';
    } else if (/^b?r#*"/.test(src.slice(i, i + 8)) && !/\w/.test(src[i - 1] ?? '')) {
      const m = /^b?r(#*)"/.exec(src.slice(i, i + 8));
      const end = src.indexOf('"' + m[1], i + m[0].length);
      i = end + 1 + m[1].length; out += '""';
    } else if (c === '"') {
      i++;
      while (i < src.length && src[i] !== '"') i += src[i] === '\\' ? 2 : 1;
      i++; out += '""';
    } else if (c === "'" && (n === '\\' || src[i + 2] === "'")) {
      i += n === '\\' ? src.indexOf("'", i + 3) - i + 1 : 3; out += "' '";
    } else { out += c; i++; }
  }
  return out;
}

// The end of the item starting at `i`: its `;`, or the brace closing its body.
function itemEnd(text, i) {
  let depth = 0;
  for (; i < text.length; i++) {
    const c = text[i];
    if (c === '(' || c === '[') depth++;
    else if (c === ')' || c === ']') depth--;
    else if (c === ';' && depth === 0) return i + 1;
    else if (c === '{' && depth === 0) {
      for (let d = 0; i < text.length; i++) {
        if (text[i] === '{') d++;
        else if (text[i] === '}' && --d === 0) return i + 1;
      }
    }
  }
  return text.length;
}

// The end of the `use` tree starting at `i`, after its `;`.
function useEnd(text, i) {
  for (let depth = 0; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}') depth--;
    else if (text[i] === ';' && depth === 0) return i + 1;
  }
  return text.length;
}

// Removes `#[cfg(test)]` items; returns the text and the test child modules' names.
function dropTests(text) {
  const testMods = [];
  const re = /#\[cfg\(test\)\]((?:\s*#\[[^\]]*\])*)\s*/g;
  let m;
  while ((m = re.exec(text))) {
    const end = itemEnd(text, re.lastIndex);
    const mod = /^(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;/.exec(text.slice(re.lastIndex, end));
    if (mod) testMods.push(mod[1]);
    text = text.slice(0, m.index) + ' '.repeat(end - m.index) + text.slice(end);
  }
  return { text, testMods };
}

// `a::{b, c::{self, D as E}}` -> ['a::b', 'a::c', 'a::c::D@E'] (`self` names the prefix).
function expandUse(tree) {
  tree = tree.replace(/\s+as\s+/g, '@').replace(/\s+/g, '');
  const split = s => {
    const parts = [];
    let depth = 0, start = 0;
    for (let i = 0; i < s.length; i++) {
      if (s[i] === '{') depth++;
      else if (s[i] === '}') depth--;
      else if (s[i] === ',' && depth === 0) { parts.push(s.slice(start, i)); start = i + 1; }
    }
    parts.push(s.slice(start));
    return parts.filter(Boolean);
  };
  const brace = tree.indexOf('{');
  if (brace < 0) return [tree.replace(/::self$/, '').replace(/::\*$/, '')];
  const prefix = tree.slice(0, brace).replace(/::$/, '');
  return split(tree.slice(brace + 1, tree.lastIndexOf('}'))).flatMap(part =>
    expandUse(part).map(p => (p === 'self' ? prefix : prefix ? `${prefix}::${p}` : p)));
}

function rsFiles(dir) {
  return readdirSync(dir).flatMap(name => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? rsFiles(path) : name.endsWith('.rs') ? [path] : [];
  });
}

// Module path of a file: lib.rs is the root, a/mod.rs and a.rs are `a`.
function modulePath(src, file) {
  const parts = relative(src, file).replace(/\.rs$/, '').split(sep);
  if (parts.at(-1) === 'mod' || parts.at(-1) === 'lib') parts.pop();
  return parts.join('::');
}

function graph(src) {
  const files = rsFiles(src).filter(f => !(f === join(src, 'main.rs') && existsSync(join(src, 'lib.rs'))));
  const modules = new Map(files.map(f => [modulePath(src, f), { file: relative(src, f), text: '' }]));
  const tests = new Set();
  for (const [name, mod] of modules) {
    const { text, testMods } = dropTests(strip(readFileSync(join(src, mod.file), 'utf8')));
    mod.text = text.replace(/pub\s*\(\s*in\s+[\w:]+\s*\)/g, 'pub');
    for (const t of testMods) tests.add(name ? `${name}::${t}` : t);
  }
  // Test modules go with everything below them.
  for (const name of [...modules.keys()]) {
    if ([...tests].some(t => name === t || name.startsWith(`${t}::`))) modules.delete(name);
  }
  // The module a path names: the longest prefix of it that is a module file.
  const resolve = segments => {
    for (let n = segments.length; n > 0; n--) {
      const name = segments.slice(0, n).join('::');
      if (modules.has(name)) return name;
    }
    return '';
  };
  const edges = new Map([...modules.keys()].map(m => [m, new Map()]));
  for (const [from, { text }] of modules) {
    const here = from ? from.split('::') : [];
    const aliases = new Map();
    for (const name of modules.keys()) {
      const segments = name.split('::');
      if (name && segments.length === here.length + 1 && name.startsWith(from ? `${from}::` : '')) {
        aliases.set(segments.at(-1), segments);
      }
    }
    // Absolute segments of a path, or null when it is no path of this crate.
    const absolute = path => {
      const [head, ...rest] = path.split('::');
      if (head === 'crate') return rest;
      if (head === 'self') return [...here, ...rest];
      if (head === 'super') {
        let base = here.slice(0, -1), tail = rest;
        while (tail[0] === 'super') { base = base.slice(0, -1); tail = tail.slice(1); }
        return [...base, ...tail];
      }
      return aliases.has(head) ? [...aliases.get(head), ...rest] : null;
    };
    const add = (path, via) => {
      const segments = absolute(path);
      if (!segments) return;
      const to = resolve(segments);
      if (to !== from && modules.has(to) && !edges.get(from).has(to)) edges.get(from).set(to, via);
    };
    let code = text;
    const useRe = /(?<![\w$])use\s+/g;
    let m;
    while ((m = useRe.exec(text))) {
      const end = useEnd(text, useRe.lastIndex);
      for (const path of expandUse(text.slice(useRe.lastIndex, end - 1))) {
        const [target, alias = target.split('::').at(-1)] = path.split('@');
        add(target, `use ${target}`);
        const segments = absolute(target);
        if (segments && modules.has(segments.join('::'))) aliases.set(alias, segments);
      }
      code = code.slice(0, m.index) + ' '.repeat(end - m.index) + code.slice(end);
    }
    for (const p of code.matchAll(/(?<![\w:$])(\w+)((?:\s*::\s*\w+)+)/g)) {
      add(p[0].replace(/\s+/g, ''), p[0].replace(/\s+/g, ''));
    }
  }
  return { modules, edges };
}

// Tarjan's strongly connected components; returns the component of each module.
function components(edges) {
  const index = new Map(), low = new Map(), comp = new Map(), stack = [];
  let counter = 0, count = 0;
  const visit = v => {
    index.set(v, counter); low.set(v, counter++); stack.push(v);
    for (const w of edges.get(v).keys()) {
      if (!index.has(w)) { visit(w); low.set(v, Math.min(low.get(v), low.get(w))); }
      else if (!comp.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) === index.get(v)) {
      let w;
      do { w = stack.pop(); comp.set(w, count); } while (w !== v);
      count++;
    }
  };
  for (const v of edges.keys()) if (!index.has(v)) visit(v);
  return comp;
}

let circles = 0;
for (const src of process.argv.slice(2)) {
  const { modules, edges } = graph(src);
  const comp = components(edges);
  // Floors: the longest chain of components, counted in components; `below`
  // keeps the next component of that chain, to print it.
  const floor = new Map(), below = new Map();
  const floorOf = c => {
    if (floor.has(c)) return floor.get(c);
    floor.set(c, 1);
    let f = 1;
    for (const [v, e] of edges) {
      if (comp.get(v) !== c) continue;
      for (const w of e.keys()) {
        const d = comp.get(w);
        if (d !== c && 1 + floorOf(d) > f) { f = 1 + floorOf(d); below.set(c, d); }
      }
    }
    floor.set(c, f);
    return f;
  };
  const tops = [...new Set(comp.values())];
  const floors = Math.max(0, ...tops.map(floorOf));
  const groups = new Map();
  for (const [v, c] of comp) groups.set(c, [...(groups.get(c) ?? []), v]);
  const cycles = [...groups.values()].filter(g => g.length > 1);
  console.log(`${src}: ${modules.size} modules, ${floors} floors, ${cycles.length} circles`);
  const chain = [tops.find(c => floor.get(c) === floors)];
  while (below.has(chain.at(-1))) chain.push(below.get(chain.at(-1)));
  const names = c => groups.get(c).map(v => modules.get(v).file).sort().join(' + ');
  if (floors > 1) console.log(`  longest chain: ${chain.map(names).join(' -> ')}`);
  for (const group of cycles) {
    circles++;
    const file = v => modules.get(v).file;
    console.log(`  circle: ${group.map(file).sort().join(', ')}`);
    for (const v of group) {
      for (const [w, via] of edges.get(v)) if (group.includes(w)) console.log(`    ${file(v)} -> ${file(w)}: ${via}`);
    }
  }
}
process.exit(circles ? 1 : 0);
