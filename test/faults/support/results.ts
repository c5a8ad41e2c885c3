import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as prettier from 'prettier';

/**
 * Global setup of the `faults` project: a fresh folder for the figures each
 * case records; its teardown prints the summary table and writes
 * test/faults/RESULTS.md (only after a run of the whole suite).
 */
export default function setup(): () => Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-faults-'));
  process.env.IDEMPOTENCY_FAULTS_RESULTS_DIR = dir;
  process.env.IDEMPOTENCY_FAULTS_STARTED_AT = String(Date.now());
  return async () => {
    // A throw here would also skip the run's own teardown (the embedded server): report, never throw.
    try {
      await summarize();
    } catch (error) {
      console.error(`\n[faults] could not write the summary: ${(error as Error).stack ?? error}`);
    }
  };
}

interface CaseResult {
  case: number;
  title: string;
  executionsExpected: number;
  executionsObserved: number;
  recordsLost: number;
  maxRecoveryMs: number | null;
  notes: string;
}

/** The table's columns; a row's sixth cell (its notes) is listed under the table. */
const COLUMNS = [
  'Case',
  'Executions expected',
  'Executions observed',
  'Records lost',
  'Max recovery',
];

function readResults(dir: string | undefined): CaseResult[] {
  if (!dir || !fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as CaseResult)
    .sort((a, b) => a.case - b.case);
}

function row(r: CaseResult): string[] {
  return [
    `${r.case}. ${r.title}`,
    String(r.executionsExpected),
    String(r.executionsObserved),
    String(r.recordsLost),
    r.maxRecoveryMs === null ? '–' : `${r.maxRecoveryMs} ms`,
    r.notes,
  ];
}

/** The cases and their four figures as a table, and each case's notes as a list under it. */
function markdown(rows: string[][]): string {
  const escape = (cell: string) => cell.replace(/\|/g, '\\|');
  return [
    `| ${COLUMNS.join(' | ')} |`,
    `| ${COLUMNS.map((_, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`,
    ...rows.map((cells) => `| ${cells.slice(0, 5).map(escape).join(' | ')} |`),
    '',
    ...rows.map((cells) => `- **${cells[0]}** ${cells[5]}`),
  ].join('\n');
}

function plain(rows: string[][]): string {
  const all = [COLUMNS, ...rows].map((cells) => cells.slice(0, 5));
  const widths = all[0].map((_, i) => Math.max(...all.map((cells) => cells[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join('  ');
  return [line(all[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...all.slice(1).map(line)]
    .concat(['', ...rows.map((cells) => `${cells[0]}: ${cells[5]}`)])
    .join('\n');
}

async function summarize(): Promise<void> {
  const dir = process.env.IDEMPOTENCY_FAULTS_RESULTS_DIR;
  const results = readResults(dir);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
  if (results.length === 0) {
    console.log('\n[faults] no case recorded any figures');
    return;
  }
  const rows = results.map(row);
  const seconds = Math.round(
    (Date.now() - Number(process.env.IDEMPOTENCY_FAULTS_STARTED_AT)) / 1000,
  );
  const url = process.env.IDEMPOTENCY_TEST_PG_URL ?? '';
  const server = process.env.IDEMPOTENCY_TEST_PG_EMBEDDED
    ? 'an embedded PostgreSQL started by the test run'
    : `the PostgreSQL at ${url.replace(/\/\/[^@/]*@/, '//')}`;
  console.log(`\n[faults] summary (${results.length} cases, ${seconds} s)\n\n${plain(rows)}\n`);
  const document = [
    '# Fault suite results',
    '',
    'Written by `npm run test:faults` (test/faults/support/results.ts); do not edit by hand.',
    '',
    `Last run: ${new Date().toISOString()}, ${results.length} cases in ${seconds} s, against ${server}` +
      ` (case 4 always restarts an embedded server of its own), Node ${process.version}, ` +
      `${os.cpus().length} cores.`,
    '',
    '- **Executions**: rows the actions wrote to an `executions` table in PostgreSQL, so the work of a',
    '  process that was killed afterwards still counts.',
    '- **Records lost**: executed keys left without a COMPLETE record, plus (case 8) records deleted',
    '  while live or unexpired.',
    '- **Max recovery**: the longest time from the fault (kill, SIGSTOP, server back up) to a correct',
    '  answer; case 5: from the completion to the last woken waiter.',
    '',
    markdown(rows),
    '',
  ].join('\n');
  // Only a run of the whole suite replaces RESULTS.md; a single case or a failed one does not.
  const cases = fs
    .readdirSync(path.join(__dirname, '..'))
    .filter((f) => f.endsWith('.fault-spec.ts'));
  if (results.length < cases.length) {
    console.log(
      `[faults] ${results.length} of ${cases.length} cases recorded figures; RESULTS.md left as it was`,
    );
    return;
  }
  // Formatted as `prettier --check .` (npm run lint) expects it.
  const file = path.join(__dirname, '..', 'RESULTS.md');
  const options = (await prettier.resolveConfig(file)) ?? {};
  fs.writeFileSync(file, await prettier.format(document, { ...options, filepath: file }));
}
