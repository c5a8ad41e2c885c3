import { performance } from 'node:perf_hooks';

export interface PacedResult {
  /** Operations started and finished. */
  operations: number;
  /** Operations per second actually achieved over the window. */
  perSecond: number;
  /** Milliseconds each operation took, in completion order. */
  latencies: number[];
  errors: number;
  /** Operations not started because `maxInFlight` were still running. */
  skipped: number;
}

/**
 * Open-loop load: starts `rate` operations per second (on a 5 ms tick) until
 * `until` settles, never more than `maxInFlight` at once, then waits for the
 * ones in flight. Unlike a closed loop, a slow server does not slow the
 * arrivals down, so latencies show what a caller would see.
 */
export async function runPaced(
  rate: number,
  operation: (i: number) => Promise<void>,
  until: Promise<unknown>,
  maxInFlight = 256,
): Promise<PacedResult> {
  const latencies: number[] = [];
  const running = new Set<Promise<void>>();
  let launched = 0;
  let skipped = 0;
  let errors = 0;
  const started = performance.now();
  const launch = () => {
    const i = launched++;
    const t0 = performance.now();
    const p: Promise<void> = operation(i)
      .then(
        () => void latencies.push(performance.now() - t0),
        () => void errors++,
      )
      .finally(() => running.delete(p));
    running.add(p);
  };
  const tick = () => {
    const due = Math.floor(((performance.now() - started) / 1000) * rate);
    while (launched + skipped < due) {
      if (running.size >= maxInFlight) skipped++;
      else launch();
    }
  };
  const timer = setInterval(tick, 5);
  try {
    await until;
  } finally {
    clearInterval(timer);
  }
  const elapsed = (performance.now() - started) / 1000;
  await Promise.all(running);
  return {
    operations: latencies.length,
    perSecond: latencies.length / elapsed,
    latencies,
    errors,
    skipped,
  };
}
