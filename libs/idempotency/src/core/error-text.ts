/**
 * An error as words in a log line or a message. Internal: the package does
 * not export it.
 *
 * - `errorText`: its own words: its message, else its code or name; for an
 *   AggregateError without a message (a connect that every address refused),
 *   its parts' joined.
 * - `describeError`: the same, led by its class name (`TypeError: …`), where
 *   the kind of failure matters to the reader.
 */
export function errorText(error: unknown): string {
  if (error instanceof AggregateError && !error.message) {
    return error.errors.map(errorText).join('; ');
  }
  if (error instanceof Error)
    return error.message || (error as { code?: string }).code || error.name;
  return String(error);
}

export function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${errorText(error)}` : String(error);
}
