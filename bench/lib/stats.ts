/** Small statistics helpers shared by the benchmarks. */

/** The lower median (an actual sample, never an average of two). */
export function median(xs: number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
}

/** Nearest-rank percentile: with n < 100 samples, p99 is the largest sample. */
export function percentile(xs: number[], p: number): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export const fmtMs = (x: number, digits = 2) => `${x.toFixed(digits)} ms`;

/** "p50 1.23 ms, p99 4.56 ms" (nearest-rank). */
export const fmtP50P99 = (xs: number[]) =>
  `p50 ${fmtMs(percentile(xs, 50))}, p99 ${fmtMs(percentile(xs, 99))}`;

/** "2.00", or "1.98–2.02" when the runs differ. */
export function fmtRange(xs: number[], digits = 2): string {
  const lo = Math.min(...xs);
  const hi = Math.max(...xs);
  return lo.toFixed(digits) === hi.toFixed(digits)
    ? lo.toFixed(digits)
    : `${lo.toFixed(digits)}–${hi.toFixed(digits)}`;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Resolves once `condition()` holds; polls every millisecond, fails after `timeoutMs`. */
export async function until(
  condition: () => boolean,
  what = 'a condition',
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(1);
  }
}

/** Reads a numeric tunable from the environment. */
export function envNumber(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value)) throw new Error(`${name}=${raw} is not a number`);
  return value;
}

/**
 * Ratios of alternating runs taken round by round (a[i] / b[i]: runs next to
 * each other in time), and their median. Pairing cancels a slow drift of the
 * machine (another job starting or stopping) that a ratio of two medians keeps.
 */
export function pairedRatios(a: number[], b: number[]): { median: number; each: number[] } {
  const each = a.map((x, i) => x / b[i]);
  return { median: median(each), each };
}
