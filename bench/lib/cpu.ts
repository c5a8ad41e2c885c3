import { execSync } from 'node:child_process';
import fs from 'node:fs';
import { cpuSnapshot } from './machine';

/** Microseconds per clock tick of /proc (USER_HZ, 100 on Linux nearly everywhere). */
const TICK_US = (() => {
  try {
    return 1e6 / Number(execSync('getconf CLK_TCK', { encoding: 'utf8' }).trim());
  } catch {
    return 10_000;
  }
})();

export interface CpuSplit {
  /** CPU microseconds of this Node process. */
  nodeUs: number;
  /**
   * CPU microseconds of the rest of this process tree: the embedded
   * PostgreSQL (every backend, WAL writer, checkpointer) when nothing else runs
   * under it; undefined without /proc. 10 ms resolution.
   */
  othersUs?: number;
  /**
   * CPU microseconds of the PostgreSQL backends serving the measured
   * connections (found by their application_name in pg_stat_activity, read
   * from /proc/<pid>/stat): works for an external server on this machine too.
   * Undefined when no backend could be read. 10 ms resolution.
   */
  backendsUs?: number;
}

/**
 * A process (its pid) or one thread of one (`{ pid, tid }`: /proc/<pid>/task/<tid>, as a
 * MariaDB connection's thread; /proc/<tid> would give the whole process).
 */
export type CpuSource = number | { pid: number; tid: number };

const statPath = (source: CpuSource) =>
  typeof source === 'number'
    ? `/proc/${source}/stat`
    : `/proc/${source.pid}/task/${source.tid}/stat`;
const keyOf = (source: CpuSource) =>
  typeof source === 'number' ? String(source) : `${source.pid}/${source.tid}`;

/** utime + stime of one process or thread, in clock ticks; undefined once it is gone or unreadable. */
function ticksOf(pid: CpuSource): number | undefined {
  try {
    const stat = fs.readFileSync(statPath(pid), 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return undefined;
  }
}

/** Current ticks of each process or thread that can be read. */
function ticksOfAll(pids: CpuSource[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const pid of pids) {
    const ticks = ticksOf(pid);
    if (ticks !== undefined) out.set(keyOf(pid), ticks);
  }
  return out;
}

/** CPU microseconds the processes `pids` have used so far (utime + stime); undefined if none can be read. */
export function cpuUsOf(pids: CpuSource[]): number | undefined {
  const ticks = ticksOfAll(pids);
  if (ticks.size === 0) return undefined;
  let sum = 0;
  for (const t of ticks.values()) sum += t;
  return sum * TICK_US;
}

/**
 * Runs `fn` and splits the CPU it cost between this process, its descendants,
 * and (with `backends`, which lists the PIDs of the backends serving the
 * measured connections) those backends. Backends that appear during the run
 * count from zero; keep the pools' connections open (idleTimeoutMillis: 0) so
 * none is closed, and its CPU lost, while it runs.
 */
export async function withCpu<T>(
  fn: () => Promise<T>,
  backends?: () => Promise<CpuSource[]>,
): Promise<{ value: T; cpu: CpuSplit }> {
  const before = backends ? ticksOfAll(await backends()) : undefined;
  const node0 = process.cpuUsage();
  const tree0 = cpuSnapshot();
  const value = await fn();
  const node = process.cpuUsage(node0);
  const tree1 = cpuSnapshot();
  const after = backends ? ticksOfAll(await backends()) : undefined;
  const nodeUs = node.user + node.system;
  const othersUs =
    tree0 && tree1 ? Math.max(0, (tree1.mine - tree0.mine) * TICK_US - nodeUs) : undefined;
  let backendsUs: number | undefined;
  if (before && after && after.size > 0) {
    let ticks = 0;
    for (const [pid, t] of after) ticks += t - (before.get(pid) ?? 0);
    backendsUs = ticks * TICK_US;
  }
  return { value, cpu: { nodeUs, othersUs, backendsUs } };
}
