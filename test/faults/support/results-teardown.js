// Global teardown of the `faults` Jest project: prints the summary table of
// what every case recorded and writes it to test/faults/RESULTS.md.
const fs = require('node:fs');
const path = require('node:path');

/** The table's columns; a row's sixth cell (its notes) is listed under the table. */
const COLUMNS = [
  'Case',
  'Executions expected',
  'Executions observed',
  'Records lost',
  'Max recovery',
];

function readResults(dir) {
  if (!dir || !fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')))
    .sort((a, b) => a.case - b.case);
}

function row(r) {
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
function markdown(rows) {
  const escape = (cell) => cell.replace(/\|/g, '\\|');
  return [
    `| ${COLUMNS.join(' | ')} |`,
    `| ${COLUMNS.map((_, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`,
    ...rows.map((cells) => `| ${cells.slice(0, 5).map(escape).join(' | ')} |`),
    '',
    ...rows.map((cells) => `- **${cells[0]}** ${cells[5]}`),
  ].join('\n');
}

function plain(rows) {
  const all = [COLUMNS, ...rows].map((cells) => cells.slice(0, 5));
  const widths = all[0].map((_, i) => Math.max(...all.map((cells) => cells[i].length)));
  const line = (cells) => cells.map((c, i) => c.padEnd(widths[i])).join('  ');
  return [line(all[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...all.slice(1).map(line)]
    .concat(['', ...rows.map((cells) => `${cells[0]}: ${cells[5]}`)])
    .join('\n');
}

module.exports = async function faultsTeardown() {
  // A throw here would also skip the run's own teardown (the embedded server): report, never throw.
  try {
    await summarize();
  } catch (error) {
    console.error(`\n[faults] could not write the summary: ${error.stack ?? error}`);
  }
};

async function summarize() {
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
  const server = globalThis.__EMBEDDED_PG__
    ? 'an embedded PostgreSQL started by the test run'
    : `the PostgreSQL at ${url.replace(/\/\/[^@/]*@/, '//')}`;
  console.log(`\n[faults] summary (${results.length} cases, ${seconds} s)\n\n${plain(rows)}\n`);
  const document = [
    '# Fault suite results',
    '',
    'Written by `npm run test:faults` (test/faults/support/results-teardown.js); do not edit by hand.',
    '',
    `Last run: ${new Date().toISOString()}, ${results.length} cases in ${seconds} s, against ${server}` +
      ` (case 4 always restarts an embedded server of its own), Node ${process.version}, ` +
      `${require('node:os').cpus().length} cores.`,
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
  const prettier = require('prettier');
  const file = path.join(__dirname, '..', 'RESULTS.md');
  const options = (await prettier.resolveConfig(file)) ?? {};
  fs.writeFileSync(file, await prettier.format(document, { ...options, filepath: file }));
}
