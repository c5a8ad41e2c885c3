#!/usr/bin/env node
import type { Interrupt } from './context';
import { ExitCode } from './exit-codes';
import { runCli } from './run';

const controller = new AbortController();
const interrupt: Interrupt = { signal: controller.signal, handled: false };

process.on('SIGINT', () => {
  // A second Ctrl-C, or a command with nothing to clean up: stop now.
  if (controller.signal.aborted || !interrupt.handled) process.exit(ExitCode.INTERRUPTED);
  controller.abort();
});

// Output piped into something that stopped reading (`| head`): stop quietly, no stack trace.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error: NodeJS.ErrnoException) => {
    process.exit(error.code === 'EPIPE' ? Number(process.exitCode ?? 0) : ExitCode.ERROR);
  });
}

function finish(code: number): void {
  process.exitCode = code;
  // Connections are closed by now; should anything still hold the process, do not hang.
  setTimeout(() => process.exit(code), 2000).unref();
}

runCli(process.argv.slice(2), { interrupt }).then(finish, (error: unknown) => {
  process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
  finish(ExitCode.ERROR);
});
