/**
 * Closed-loop comparisons of store variants against an external server
 * (Redis, MariaDB): each run's rate, round trips per operation (counted in
 * the driver under the run's name) and CPU per operation, split between this
 * process and the server's process; variants alternate round by round.
 */
import { CpuSource, CpuSplit, cpuUsOf, withCpu } from './cpu';
import { fmtRange, median, pairedRatios } from './stats';
import { alternate, measure, Throughput } from './throughput';

export type Run = Throughput & {
  cpu: CpuSplit;
  /** CPU of the whole server process meanwhile (µs), when `wholeServer` was given. */
  wholeServerUs?: number;
};

export type Operation = (caller: number, i: number) => Promise<void>;

/**
 * One closed-loop run; `serving` lists the processes or threads that serve
 * the run's connections (their CPU is `cpu.backendsUs`); `wholeServer`, the
 * server's whole process (background work and other users included).
 */
export async function timedRun(
  options: { seconds: number; concurrency: number; app: string },
  operation: Operation,
  serving?: () => Promise<CpuSource[]>,
  wholeServer?: CpuSource[],
): Promise<Run> {
  const whole0 = wholeServer && cpuUsOf(wholeServer);
  const { value, cpu } = await withCpu(() => measure(options, operation), serving);
  const whole1 = wholeServer && cpuUsOf(wholeServer);
  const wholeServerUs = whole0 === undefined || whole1 === undefined ? undefined : whole1 - whole0;
  return { ...value, cpu, wholeServerUs };
}

/** A warm-up of every variant, then `rounds` alternating rounds; each variant's runs in order. */
export async function warmAndAlternate<V extends string>(
  rounds: number,
  variants: Record<V, () => Promise<Run>>,
  warm: Record<V, () => Promise<Run>>,
  log: (round: number, name: string) => void,
): Promise<Record<V, Run[]>> {
  for (const v of Object.keys(warm) as V[]) await warm[v]();
  return (await alternate(rounds, variants, log)) as Record<V, Run[]>;
}

export const rateOf = (xs: Run[]) => median(xs.map((x) => x.perSecond));
export const runsOf = (xs: Run[]) => xs.map((x) => x.perSecond.toFixed(0)).join(' / ');
export const ratiosOf = (a: Run[], b: Run[]) =>
  pairedRatios(
    a.map((x) => x.perSecond),
    b.map((x) => x.perSecond),
  );
export const tripsOf = (xs: Run[]) => fmtRange(xs.map((x) => x.roundTrips));
/** True when every run made exactly `n` round trips per operation (to 0.005). */
export const tripsAre = (xs: Run[], n: number) =>
  xs.every((x) => Math.abs(x.roundTrips - n) < 0.005);

/**
 * CPU per operation, medians of the runs: this process (`node`), the server's
 * processes or threads serving the run (`server`), the whole server (`whole`).
 */
export function cpuPerOp(xs: Run[]): { node: number; server?: number; whole?: number } {
  const perOp = (f: (x: Run) => number | undefined) =>
    xs.every((x) => f(x) !== undefined) ? median(xs.map((x) => f(x)! / x.operations)) : undefined;
  return {
    node: perOp((x) => x.cpu.nodeUs)!,
    server: perOp((x) => x.cpu.backendsUs),
    whole: perOp((x) => x.wholeServerUs),
  };
}

export const us = (x?: number) => (x === undefined ? '?' : `${x.toFixed(0)} µs`);
export const ratioText = (r: { median: number; each: number[] }) =>
  `${r.median.toFixed(2)} (rounds ${r.each.map((x) => x.toFixed(2)).join(' / ')})`;
