/**
 * An error's own words for a message: its message, else its code or name; for
 * an AggregateError without a message (a connect that every address refused),
 * its parts' joined. Internal: the package does not export it.
 */
export function errorText(error: unknown): string {
  if (error instanceof AggregateError && !error.message) {
    return error.errors.map(errorText).join('; ');
  }
  if (error instanceof Error)
    return error.message || (error as { code?: string }).code || error.name;
  return String(error);
}
