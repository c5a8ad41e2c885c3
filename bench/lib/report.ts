import fs from 'node:fs';
import path from 'node:path';
import Table from 'cli-table3';
import { format, resolveConfig } from 'prettier';

/** One Markdown table row; pipes inside cells are escaped. */
export const mdRow = (cells: string[]) =>
  `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;

export function mdTable(header: string[], rows: string[][], align?: string[]): string[] {
  return [mdRow(header), mdRow(align ?? header.map(() => '---')), ...rows.map(mdRow)];
}

/** Writes Markdown formatted as the repository formats it, so `npm run lint` stays clean. */
export async function writeMarkdown(file: string, markdown: string): Promise<void> {
  const style = (await resolveConfig(file)) ?? {};
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, await format(markdown, { ...style, parser: 'markdown' }));
}

/** A plain console table (no colours), word-wrapped to `widths`. */
export function consoleTable(header: string[], rows: string[][], widths?: number[]): string {
  const table = new Table({
    head: header,
    ...(widths ? { colWidths: widths, wordWrap: true } : {}),
    style: { head: [], border: [] },
  });
  table.push(...rows);
  return table.toString();
}

/**
 * Where a results file goes: bench/ by default, or the folder named by
 * BENCH_RESULTS_DIR (for shortened runs, which must not replace the committed
 * results).
 */
export function resultsPath(file: string): string {
  const dir = path.resolve(process.env.BENCH_RESULTS_DIR || path.join(__dirname, '..'));
  fs.mkdirSync(dir, { recursive: true });
  return path.join(dir, file);
}
