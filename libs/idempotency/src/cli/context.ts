import type { Command } from 'commander';
import { Connection, GlobalOptions, resolveConnection } from './connection';
import { ExitCode } from './exit-codes';

/** Where the CLI reads and writes. `runCli` defaults it to the process's own. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  env: Record<string, string | undefined>;
  /** Ctrl-C: see `Interrupt`. */
  interrupt?: Interrupt;
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

  constructor(readonly io: CliIo) {}

  /** The connection named by the program-wide options (or DATABASE_URL). */
  connection(command: Command): Connection {
    return resolveConnection(command.optsWithGlobals<GlobalOptions>(), this.io.env);
  }

  /** Writes `text` and a newline to stdout. */
  print(text: string): void {
    this.io.stdout(`${text}\n`);
  }

  printJson(value: unknown): void {
    this.print(JSON.stringify(value, null, 2));
  }
}
