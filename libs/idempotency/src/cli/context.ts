import type { Command } from 'commander';
import { Connection, GlobalOptions, resolveConnection } from './connection';
import { ExitCode } from './exit-codes';
import { NO_PROGRESS, Progress, TerminalProgress } from './progress';

/** Where the CLI reads and writes. `runCli` defaults it to the process's own. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  env: Record<string, string | undefined>;
  /** Ctrl-C: see `Interrupt`. */
  interrupt?: Interrupt;
  /**
   * Present when stderr is a terminal (`runCli` asks `process.stderr.isTTY`):
   * long work then draws a progress line there. `columns` is its width now.
   */
  terminal?: { columns(): number | undefined };
}

/**
 * How `main` passes Ctrl-C on. A command that must clean up (verify drops its
 * scratch schema) sets `handled` and watches `signal`; for any other command
 * `main` exits at once.
 */
export interface Interrupt {
  signal: AbortSignal;
  handled: boolean;
}

/** What a command's action gets besides its own arguments. */
export class CommandContext {
  exitCode: ExitCode = ExitCode.OK;
  private line: Progress = NO_PROGRESS;

  constructor(readonly io: CliIo) {}

  /**
   * The progress line for work that may take more than a second: drawn on
   * stderr when it is a terminal, never with `--json` (a script reads that
   * output, and a terminal's escape codes would only get in its way), and
   * never on a terminal that says it cannot erase a line (`TERM=dumb`).
   */
  progress(options: { json?: boolean }): Progress {
    const { terminal, env } = this.io;
    if (!terminal || options.json || env.TERM === 'dumb') return NO_PROGRESS;
    this.line.clear();
    this.line = new TerminalProgress(this.io.stderr, () => terminal.columns());
    return this.line;
  }

  /** Erases the progress line, if one is drawn. */
  clearProgress(): void {
    this.line.clear();
  }

  /** The connection named by the program-wide options (or DATABASE_URL). */
  connection(command: Command): Connection {
    return resolveConnection(command.optsWithGlobals<GlobalOptions>(), this.io.env);
  }

  /** Writes `text` and a newline to stdout (erasing the progress line first). */
  print(text: string): void {
    this.line.clear();
    this.io.stdout(`${text}\n`);
  }

  printJson(value: unknown): void {
    this.print(JSON.stringify(value, null, 2));
  }
}
