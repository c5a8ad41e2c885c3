import { SectionResult } from './context';

/** Notes for RESULTS.md, drawn from this run's figures. */
export function analysisNotes(
  results: SectionResult[],
  machine: { loadBefore: { loadavg: number[]; busy?: number }; cores: number },
): string[] {
  const notes = results.flatMap((r) => r.notes);
  const [one] = machine.loadBefore.loadavg;
  if (one > machine.cores * 0.25 || (machine.loadBefore.busy ?? 0) > 0.1)
    notes.push(
      `The machine was not idle when the run began (1-minute load ${one.toFixed(2)} on ${machine.cores} cores): other work competed for the CPU, so absolute figures are low and noisier than on an idle machine; the ratios, taken from alternating runs, hold up better.`,
    );
  return notes;
}
