/**
 * Self time of a V8 .cpuprofile (node --cpu-prof) by owner (this library's
 * files, each package, Node's internals) and by function, optionally per
 * request, and against a baseline profile:
 *
 *   node -r @swc-node/register bench/tools/cpuprofile-summary.ts decorated.cpuprofile [requests]
 *     [--baseline=undecorated.cpuprofile --baseline-requests=N] [--top=40]
 *
 * The samples are wall-clock: "(idle)" is time waiting for the network, and a
 * process descheduled inside a system call (writev waking the load generator)
 * piles samples onto that call; those rows are shown but left out of the totals.
 */
import fs from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

/** Rows that are not CPU spent on requests: waiting, scheduling, module loading at startup. */
const NOT_REQUEST_WORK =
  /^\((idle|program)\)|^writev|modules\/cjs\/loader|modules\/esm|@swc|typescript|pirates/;

function ownerOf(url: string): string {
  const lib = url.match(/libs\/idempotency\/src\/(.*)$/);
  if (lib) return `library ${lib[1]}`;
  const pkg = url.match(/node_modules\/((@[^/]+\/)?[^/]+)/);
  if (pkg) return pkg[1];
  return url.startsWith('node:') ? url : url.replace(/^.*\/(bench|apps)\//, '$1/');
}

function selfTimes(file: string, perRequest: number) {
  const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const owners = new Map<string, number>();
  const functions = new Map<string, number>();
  const add = (map: Map<string, number>, key: string, us: number) =>
    map.set(key, (map.get(key) ?? 0) + us / perRequest);
  profile.samples.forEach((id, i) => {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    const us = profile.timeDeltas[i] ?? 0;
    // Without a URL: V8 itself ((garbage collector), runMicrotasks) or a native binding (writev).
    const owner = url ? ownerOf(url) : `${functionName} (native)`;
    add(functions, url ? `${functionName || '(anonymous)'} ${owner}:${lineNumber + 1}` : owner, us);
    add(owners, owner, us);
  });
  return { owners, functions };
}

function table(
  title: string,
  main: Map<string, number>,
  base: Map<string, number> | undefined,
  top: number,
  unit: string,
) {
  const keys = [...new Set([...main.keys(), ...(base?.keys() ?? [])])];
  const delta = (k: string) => (main.get(k) ?? 0) - (base?.get(k) ?? 0);
  keys.sort((a, b) => delta(b) - delta(a));
  const total = (m?: Map<string, number>) =>
    [...(m?.entries() ?? [])]
      .filter(([k]) => !NOT_REQUEST_WORK.test(k))
      .reduce((s, [, v]) => s + v, 0);
  console.log(`\n${title} (${unit}${base ? '; baseline, this, difference' : ''})`);
  console.log(
    `  total without idle, writev, (program) and module loading: ${base ? `${total(base).toFixed(1)} → ` : ''}${total(main).toFixed(1)}`,
  );
  for (const k of keys.slice(0, top)) {
    const cells = base
      ? [(base.get(k) ?? 0).toFixed(2), (main.get(k) ?? 0).toFixed(2), delta(k).toFixed(2)]
      : [(main.get(k) ?? 0).toFixed(2)];
    console.log(`  ${cells.map((c) => c.padStart(8)).join(' ')}  ${k}`);
  }
}

function main() {
  const args = process.argv.slice(2);
  const option = (name: string) =>
    args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const [file, requests] = args.filter((a) => !a.startsWith('--'));
  if (!file)
    throw new Error('usage: cpuprofile-summary.ts <file.cpuprofile> [requests] [--baseline=…]');
  const per = Number(requests ?? 0) || 0;
  const unit = per ? 'µs per request' : 'ms';
  const scale = per || 1000;
  const top = Number(option('top') ?? 40);
  const main = selfTimes(file, scale);
  const baselineFile = option('baseline');
  const base = baselineFile
    ? selfTimes(baselineFile, Number(option('baseline-requests') ?? 0) || 1000)
    : undefined;
  table('self time by owner', main.owners, base?.owners, 25, unit);
  table('self time by function', main.functions, base?.functions, top, unit);
}

main();
