import fs from 'node:fs';
import os from 'node:os';
import { sleep } from './stats';

export interface Machine {
  cores: number;
  cpu: string;
  memory: string;
  os: string;
  node: string;
  postgres: string;
}

export function describeMachine(pgVersion: string, pgHow: string): Machine {
  const cpus = os.cpus();
  return {
    cores: cpus.length,
    cpu: `${cpus.length} × ${cpus[0]?.model.trim() ?? 'unknown'}`,
    memory: `${(os.totalmem() / 2 ** 30).toFixed(1)} GiB`,
    os: `${os.type()} ${os.release()} (${process.arch})`,
    node: process.version,
    postgres: `${pgVersion} — ${pgHow}`,
  };
}

export function machineRows(machine: Machine): string[][] {
  return [
    ['CPU', machine.cpu],
    ['Memory', machine.memory],
    ['OS', machine.os],
    ['Node.js', machine.node],
    ['PostgreSQL', machine.postgres],
  ];
}

function cpuTimes(): { busy: number; total: number } | undefined {
  try {
    const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const fields = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = fields[3] + (fields[4] ?? 0); // idle + iowait
    const total = fields.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  } catch {
    return undefined;
  }
}

/**
 * What the machine is doing besides us: the 1/5/15-minute load averages and
 * the share of all cores busy over `sampleMs` (from /proc/stat; undefined
 * elsewhere). Taken while the benchmark itself is idle.
 */
export async function sampleLoad(sampleMs = 3000): Promise<{ loadavg: number[]; busy?: number }> {
  const before = cpuTimes();
  await sleep(sampleMs);
  const after = cpuTimes();
  const busy =
    before && after && after.total > before.total
      ? (after.busy - before.busy) / (after.total - before.total)
      : undefined;
  return { loadavg: os.loadavg(), busy };
}

export function describeLoad(load: { loadavg: number[]; busy?: number }): string {
  const avg = load.loadavg.map((x) => x.toFixed(2)).join(' / ');
  return `load average ${avg} (1 / 5 / 15 min)${
    load.busy === undefined ? '' : `, CPU ${(load.busy * 100).toFixed(0)}% busy over 3 s`
  }`;
}
