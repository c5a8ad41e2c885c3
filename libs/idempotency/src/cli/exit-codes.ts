/**
 * The CLI's exit codes. Scripts may rely on them; they are listed in
 * `nest-idempotency --help` and in docs/cli.md.
 */
export const ExitCode = {
  /** The command did what it was asked. */
  OK: 0,
  /** `verify`: a guarantee was graded FAIL, or N/A (not checked is not a pass); `receipts verify`: a chain is broken. */
  VERIFY_FAILED: 1,
  /** Bad arguments: unknown command or option, invalid value, no database or Redis URL. */
  USAGE: 2,
  /** The database or Redis could not be reached (refused, unknown host, no answer in time, login refused). */
  UNREACHABLE: 3,
  /** The records table is missing or has the wrong shape; or verify may not create its scratch schema (or table). */
  SCHEMA: 4,
  /** `inspect`, `resolve`: no record for that scope and key (or digest). */
  NOT_FOUND: 5,
  /** Anything else: the server refused a statement (e.g. permission denied), a driver is missing, or an unexpected error. */
  ERROR: 6,
  /** `inspect`, `resolve`: the digest matches more than one record; nothing was done. */
  SEVERAL_RECORDS: 7,
  /** Interrupted (SIGINT) before the command finished. */
  INTERRUPTED: 130,
} as const;

export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** An error the CLI reports as one line on stderr, exiting with `exitCode`. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: ExitCode,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** The exit codes as help text. */
export const EXIT_CODES_HELP = `
Exit codes:
  0    success
  1    verify: a guarantee FAILed, or could not be checked (N/A is not a pass); receipts verify: a chain is broken
  2    usage: bad command, option or value; no database or Redis URL
  3    unreachable: the database or Redis (refused, unknown host, no answer within --timeout, login refused)
  4    schema: the records table is missing or has the wrong shape; verify may not create its scratch schema or table
  5    inspect, resolve: no such record
  6    other error (e.g. the server refused a statement: permission denied; a driver is not installed)
  7    inspect, resolve: the digest matches more than one record; nothing was done
  130  interrupted`;
