import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command, CommanderError } from 'commander';
import { wholeNumber } from './arguments';
import { describeError } from './connection';
import { CliIo, CommandContext } from './context';
import { CliError, EXIT_CODES_HELP, ExitCode } from './exit-codes';
import { addInspectCommand } from './inspect';
import { addListCommand } from './list';
import { addPurgeCommand } from './purge';
import { addReceiptsCommand } from './receipts';
import { addResolveCommand } from './resolve';
import { addSchemaSqlCommand } from './schema-sql';
import { addVerifyCommand } from './verify';

/**
 * Runs the CLI in this process and resolves with its exit code; it never
 * throws and never exits the process. `io` defaults to the process's own
 * stdout, stderr and environment. Errors are one line on stderr, never a stack trace.
 *
 *   const code = await runCli(['list', '--json'], { stdout, stderr, env });
 */
export async function runCli(argv: readonly string[], io: Partial<CliIo> = {}): Promise<number> {
  const fullIo: CliIo = {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
    env: process.env,
    terminal: process.stderr.isTTY ? { columns: () => process.stderr.columns } : undefined,
    ...io,
  };
  const context = new CommandContext(fullIo);
  try {
    await buildProgram(context).parseAsync([...argv], { from: 'user' });
    return context.exitCode;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Commander has written its message (or the help) already.
      return error.exitCode === 0 ? ExitCode.OK : ExitCode.USAGE;
    }
    const failure =
      error instanceof CliError ? error : new CliError(describeError(error), ExitCode.ERROR);
    context.clearProgress();
    fullIo.stderr(`error: ${failure.message}\n`);
    return failure.exitCode;
  }
}

function buildProgram(context: CommandContext): Command {
  const program = new Command('nest-idempotency')
    .description(
      'Operate a nest-idempotency store (PostgreSQL, MySQL, MariaDB or Redis): list, inspect, purge and resolve records; verify its guarantees.',
    )
    .version(packageVersion(), '-V, --version')
    .exitOverride()
    .configureOutput({
      writeOut: (text) => context.io.stdout(text),
      writeErr: (text) => context.io.stderr(text),
      // One line: commander puts its "(Did you mean ...?)" on a line of its own.
      outputError: (text, write) => write(`${text.trimEnd().replace(/\s*\n\s*/g, ' ')}\n`),
    })
    .configureHelp({ showGlobalOptions: true })
    .option(
      '--database-url <url>',
      'postgres://, mysql:// or mariadb:// URL (default: $DATABASE_URL); the scheme picks the DataSource type',
    )
    .option(
      '--schema <name>',
      "schema of the records table (default: public; MySQL/MariaDB: the URL's database)",
    )
    .option('--table <name>', 'the records table', 'idempotency_records')
    .option(
      '--redis-url <url>',
      'redis:// or rediss:// URL of the Redis store (default: $REDIS_URL); with --redis-cluster, comma-separated seed nodes',
    )
    .option('--redis-cluster', 'the Redis URLs are seed nodes of a Redis Cluster')
    .option('--key-prefix <prefix>', 'key prefix of the Redis store (default: idempotency:)')
    .option(
      '--timeout <ms>',
      'bound on connecting and on each statement',
      wholeNumber(1, 600_000),
      5000,
    )
    .addHelpText(
      'after',
      `
Reading never changes a record: list, inspect and opening the store move nothing.
Records are named as logs name them, <scope>/#<12 hex of SHA-256>, never by raw key;
inspect and resolve take that name too. --json includes raw keys.
On a terminal, work that takes more than a second shows its progress on stderr (never with --json).
${EXIT_CODES_HELP}`,
    );
  addListCommand(program, context);
  addInspectCommand(program, context);
  addPurgeCommand(program, context);
  addResolveCommand(program, context);
  addVerifyCommand(program, context);
  addReceiptsCommand(program, context);
  addSchemaSqlCommand(program, context);
  return program;
}

function packageVersion(): string {
  try {
    // dist/cli/run.js and src/cli/run.ts are both two levels below the package root.
    const manifest = JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8'));
    return String(manifest.version);
  } catch {
    return 'unknown';
  }
}
