import { performance } from 'node:perf_hooks';
import { queriesOf } from './driver-count';

export interface Throughput {
  perSecond: number;
  operations: number;
  /** Driver round trips per operation on the connections named `app`. */
  roundTrips: number;
}

export interface MeasureOptions {
  seconds: number;
  concurrency: number;
  /** application_name whose driver round trips are attributed to the operation. */
  app: string;
}

/** `concurrency` callers loop on `operation` for `seconds` (closed loop). */
export async function measure(
  options: MeasureOptions,
  operation: (caller: number, i: number) => Promise<void>,
): Promise<Throughput> {
  const queriesBefore = queriesOf(options.app);
  const started = performance.now();
  const end = started + options.seconds * 1000;
  let operations = 0;
  await Promise.all(
    Array.from({ length: options.concurrency }, async (_, caller) => {
      for (let i = 0; performance.now() < end; i++) {
        await operation(caller, i);
        operations++;
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  return {
    perSecond: operations / elapsed,
    operations,
    roundTrips: (queriesOf(options.app) - queriesBefore) / operations,
  };
}

/**
 * Runs the variants in turn, A/B/A/B…, `rounds` times, and returns each
 * variant's samples in order. Alternating keeps a drifting machine (another
 * job starting, a checkpoint) from landing on one variant only.
 */
export async function alternate<T>(
  rounds: number,
  variants: Record<string, () => Promise<T>>,
  onProgress?: (round: number, name: string) => void,
): Promise<Record<string, T[]>> {
  const samples: Record<string, T[]> = {};
  for (const name of Object.keys(variants)) samples[name] = [];
  for (let round = 0; round < rounds; round++) {
    for (const [name, run] of Object.entries(variants)) {
      onProgress?.(round, name);
      samples[name].push(await run());
    }
  }
  return samples;
}
