import { execSync } from 'node:child_process';
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
}

/** Runs `fn` and splits the CPU it cost between this process and its descendants. */
export async function withCpu<T>(fn: () => Promise<T>): Promise<{ value: T; cpu: CpuSplit }> {
  const node0 = process.cpuUsage();
  const tree0 = cpuSnapshot();
  const value = await fn();
  const node = process.cpuUsage(node0);
  const tree1 = cpuSnapshot();
  const nodeUs = node.user + node.system;
  const othersUs =
    tree0 && tree1 ? Math.max(0, (tree1.mine - tree0.mine) * TICK_US - nodeUs) : undefined;
  return { value, cpu: { nodeUs, othersUs } };
}
