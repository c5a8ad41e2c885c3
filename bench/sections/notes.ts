import { SectionResult } from './context';

/** Notes for RESULTS.md, drawn from this run's figures. */
export function analysisNotes(
  results: SectionResult[],
  load: { name: string; other?: number }[],
): string[] {
  const notes = results.flatMap((r) => r.notes);
  const busy = load.filter((s) => (s.other ?? 0) > 0.05);
  notes.push(
    busy.length > 0
      ? `Other work used the machine during ${busy.map((s) => `${s.name} (${((s.other ?? 0) * 100).toFixed(0)}% of the CPU)`).join(', ')}: those sections' absolute figures are lower and noisier than on an idle machine. Their ratios come from alternating runs, paired round by round, and hold up better; the spread of the rounds' ratios (How column) shows how much.`
      : `Nothing else used more than 5% of the CPU during any section.`,
  );
  return notes;
}
