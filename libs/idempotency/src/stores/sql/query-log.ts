/**
 * Where a SQL dialect reports the statements it sends: the TypeORM front hands
 * it the DataSource's logger (./typeorm.query-log.ts); a store on a plain
 * driver pool logs no statements, only its warnings.
 */
export interface QueryLog {
  /**
   * Whether `query` does anything, so that the parameters shown in place of
   * the real ones (digests, sizes) are built only for a logger that will see them.
   */
  logsQueries(): boolean;
  /** A statement about to be sent, with the parameters logs may show. */
  query(text: string, shown: unknown[]): void;
  /** A statement that failed, with the parameters logs may show. */
  queryError(error: Error | string, text: string, shown: unknown[]): void;
  /** Something about a connection the store does not own (an 'error' event on a pooled connection). */
  warn(message: string): void;
}

/**
 * Reports a failed statement to the query log, after the call was answered.
 * A logger that throws must not take the call (or the shared deadline timer)
 * with it: its exception is dropped.
 */
export function logFailedQuery(
  log: QueryLog,
  error: unknown,
  query: { readonly text: string; logged(): unknown[] },
): void {
  try {
    log.queryError(error instanceof Error ? error : String(error), query.text, query.logged());
  } catch {
    // Dropped on purpose: see above.
  }
}

/** A query log for a store that logs its warnings and no statements. */
export function warningsOnly(warn: (message: string) => void): QueryLog {
  return {
    logsQueries: () => false,
    query: () => undefined,
    queryError: () => undefined,
    warn,
  };
}

/** As ../../core/key.ts storedScope joins a scope and its tenant. */
const TENANT_MARK = '#tenant:';

/**
 * A stored scope as logs may show it: without the tenant a stored scope
 * carries (`storedScope(scope, tenant)`). Not even a digest of it: tenants are
 * often few and guessable, and the record's key digest (which covers the
 * tenant) already tells records apart.
 */
export function loggedScope(stored: string): string {
  const at = stored.indexOf(TENANT_MARK);
  return at < 0 ? stored : `${stored.slice(0, at)}${TENANT_MARK}<redacted>`;
}

/** What logs show for a continuation id: whoever holds it may resume the record. */
export const HIDDEN_CONTINUATION = '<continuation>';
