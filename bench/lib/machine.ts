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
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    const fields = line.trim().split(/\s+/).slice(1, 9).map(Number);
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

export interface CpuSnapshot {
  /** Clock ticks the whole machine spent busy, and in all (from /proc/stat). */
  machineBusy: number;
  machineTotal: number;
  /** Clock ticks used by this process and every descendant, live or reaped. */
  mine: number;
}

/** utime + stime + cutime + cstime and the parent of every process, from /proc/<pid>/stat. */
function processTicks(): Map<number, { ppid: number; ticks: number }> {
  const table = new Map<number, { ppid: number; ticks: number }>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The command name may hold spaces and parentheses: fields start after the last ')'.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ticks =
        Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
      table.set(Number(entry), { ppid: Number(fields[1]), ticks });
    } catch {
      // the process ended while we looked
    }
  }
  return table;
}

/**
 * Where the CPU went: the machine's busy ticks and this process tree's
 * (PostgreSQL, the application processes and autocannon included), with the
 * trees of `alsoMine` (servers outside it that the benchmark loads). The
 * difference between two snapshots is other people's work. Undefined where
 * /proc is not there.
 */
export function cpuSnapshot(alsoMine: number[] = []): CpuSnapshot | undefined {
  const machine = cpuTimes();
  if (!machine) return undefined;
  const table = processTicks();
  const children = new Map<number, number[]>();
  for (const [pid, { ppid }] of table) children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  let mine = 0;
  const stack = [process.pid, ...alsoMine.filter((pid) => pid !== process.pid)];
  while (stack.length > 0) {
    const pid = stack.pop()!;
    mine += table.get(pid)?.ticks ?? 0;
    stack.push(...(children.get(pid) ?? []));
  }
  return { machineBusy: machine.busy, machineTotal: machine.total, mine };
}

/** Share of all cores that processes outside this tree kept busy between two snapshots. */
export function otherShare(a?: CpuSnapshot, b?: CpuSnapshot): number | undefined {
  if (!a || !b || b.machineTotal <= a.machineTotal) return undefined;
  const other = b.machineBusy - a.machineBusy - (b.mine - a.mine);
  return Math.max(0, other / (b.machineTotal - a.machineTotal));
}
