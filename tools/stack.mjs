#!/usr/bin/env node
// The supported stacks other than the root's. The root package.json is the
// current stack (Nest 12, TypeORM 1); each folder under stacks/ holds a
// stack.json (the dependency versions that differ) and the package-lock.json
// of the whole workspace on that stack.
//
//   node tools/stack.mjs run nest11 -- npm test   copy the working tree to .stacks/nest11,
//                                                 install that stack there (npm ci), run the command
//   node tools/stack.mjs lock nest11              re-resolve the stack's lockfile after a change
//                                                 to package.json or stack.json
//   node tools/stack.mjs check                    fail when a stack's lockfile no longer matches
//                                                 the root package.json with its overrides
//
// A copy rather than a second node_modules beside the root: every process a
// test starts (Nest apps, workers, the CLI) then resolves packages the way an
// application on that stack does, with nothing to redirect.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');
const STACKS = path.join(ROOT, 'stacks');
const COPIES = path.join(ROOT, '.stacks');

function fail(message) {
  process.stderr.write(`stack: ${message}\n`);
  process.exit(2);
}

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function stackNames() {
  return fs.readdirSync(STACKS).filter((n) => fs.existsSync(path.join(STACKS, n, 'stack.json')));
}

function definition(name) {
  const file = path.join(STACKS, name, 'stack.json');
  if (!fs.existsSync(file)) fail(`unknown stack "${name}"; known: ${stackNames().join(', ')}`);
  return readJson(file);
}

/** The root package.json with the stack's versions in place of the root's. */
function manifest(name) {
  const stack = definition(name);
  const root = readJson(path.join(ROOT, 'package.json'));
  const out = structuredClone(root);
  for (const [pkg, range] of Object.entries(stack.dependencies)) {
    const section = ['dependencies', 'devDependencies'].find((s) => out[s]?.[pkg] !== undefined);
    if (!section) fail(`${name}: ${pkg} is not a dependency of the root package.json`);
    out[section][pkg] = range;
  }
  return `${JSON.stringify(out, null, 2)}\n`;
}

function digest(text) {
  return createHash('sha256').update(text).digest('hex');
}

/** The working tree as git sees it (tracked and untracked, not ignored), copied to .stacks/<name>. */
function copyTree(name) {
  const target = path.join(COPIES, name);
  const files = execFileSync(
    'git',
    ['ls-files', '-z', '--cached', '--others', '--exclude-standard'],
    {
      cwd: ROOT,
    },
  )
    .toString()
    .split('\0')
    .filter(Boolean);
  const keep = new Set(['node_modules', '.install-digest']);
  if (fs.existsSync(target)) {
    // Everything but the installed packages goes, so a deleted file does not linger.
    for (const entry of fs.readdirSync(target)) {
      if (!keep.has(entry)) fs.rmSync(path.join(target, entry), { recursive: true, force: true });
    }
  }
  for (const file of files) {
    const from = path.join(ROOT, file);
    if (!fs.existsSync(from) || file.startsWith('stacks/')) continue;
    const to = path.join(target, file);
    fs.mkdirSync(path.dirname(to), { recursive: true });
    fs.copyFileSync(from, to);
  }
  return target;
}

function sh(cwd, command, args) {
  const result = spawnSync(command, args, { cwd, stdio: 'inherit' });
  if (result.status !== 0) process.exit(result.status ?? 1);
}

function install(name, { update }) {
  const target = copyTree(name);
  const pkg = manifest(name);
  fs.writeFileSync(path.join(target, 'package.json'), pkg);
  const lockFile = path.join(STACKS, name, 'package-lock.json');
  if (update || !fs.existsSync(lockFile)) {
    fs.rmSync(path.join(target, 'package-lock.json'), { force: true });
    sh(target, 'npm', ['install', '--no-audit', '--no-fund']);
    fs.copyFileSync(path.join(target, 'package-lock.json'), lockFile);
    console.log(`stack: wrote stacks/${name}/package-lock.json`);
  } else {
    fs.copyFileSync(lockFile, path.join(target, 'package-lock.json'));
    const wanted = digest(pkg + fs.readFileSync(lockFile, 'utf8'));
    const marker = path.join(target, '.install-digest');
    const installed = fs.existsSync(marker) ? fs.readFileSync(marker, 'utf8') : '';
    if (installed === wanted && fs.existsSync(path.join(target, 'node_modules'))) {
      // Same packages as last time: only the library's own build is redone.
      sh(target, 'npm', ['run', 'build']);
    } else {
      sh(target, 'npm', ['ci', '--no-audit', '--no-fund']);
      fs.writeFileSync(marker, wanted);
    }
  }
  return target;
}

/** The stack's lockfile must have been resolved from today's package.json and stack.json. */
function check() {
  let stale = 0;
  for (const name of stackNames()) {
    const lockFile = path.join(STACKS, name, 'package-lock.json');
    if (!fs.existsSync(lockFile)) {
      console.error(`stack ${name}: no package-lock.json; run: node tools/stack.mjs lock ${name}`);
      stale++;
      continue;
    }
    const lock = readJson(lockFile).packages[''];
    const pkg = JSON.parse(manifest(name));
    for (const section of ['dependencies', 'devDependencies']) {
      const want = JSON.stringify(pkg[section] ?? {});
      const have = JSON.stringify(lock[section] ?? {});
      if (want !== have) {
        console.error(
          `stack ${name}: package-lock.json ${section} differ from package.json with stacks/${name}/stack.json; run: node tools/stack.mjs lock ${name}`,
        );
        stale++;
      }
    }
  }
  if (stale > 0) process.exit(1);
  console.log(`stacks: ${stackNames().join(', ')} match package.json`);
}

const [command, name, separator, ...rest] = process.argv.slice(2);
switch (command) {
  case 'run': {
    if (!name || separator !== '--' || rest.length === 0)
      fail('usage: node tools/stack.mjs run <stack> -- <command…>');
    const target = install(name, { update: false });
    console.log(
      `stack ${name}: ${definition(name).description}; running in ${path.relative(ROOT, target)}: ${rest.join(' ')}`,
    );
    const result = spawnSync(rest[0], rest.slice(1), { cwd: target, stdio: 'inherit' });
    process.exit(result.status ?? 1);
    break;
  }
  case 'lock':
    if (!name) fail('usage: node tools/stack.mjs lock <stack>');
    install(name, { update: true });
    break;
  case 'check':
    check();
    break;
  default:
    fail('usage: node tools/stack.mjs run <stack> -- <command…> | lock <stack> | check');
}
