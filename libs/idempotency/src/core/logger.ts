/** The slice of a logger the engine needs; Nest's `Logger` and `console` both fit. */
export interface IdempotencyLogger {
  warn(message: string): void;
  error(message: string): void;
  debug?(message: string): void;
}
