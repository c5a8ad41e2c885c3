export { CliError, ExitCode } from './exit-codes';
export type { CliIo, Interrupt } from './context';
export { runCli } from './run';
