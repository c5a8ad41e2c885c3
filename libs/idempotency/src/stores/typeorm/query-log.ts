import { AbstractLogger, type Logger } from 'typeorm';

/**
 * Whether the DataSource's logger does anything with `logQuery`, so that the
 * parameters shown in place of the real ones (digests, sizes) are built only
 * for a logger that will see them. TypeORM's own loggers (what `logging`
 * configures) say so themselves; any other logger, or one whose `logQuery`
 * was replaced, is always called.
 */
export function logsQueries(logger: Logger): boolean {
  if (logger instanceof AbstractLogger && logger.logQuery === AbstractLogger.prototype.logQuery) {
    return (logger as unknown as { isLogEnabledFor(type: string): boolean }).isLogEnabledFor(
      'query',
    );
  }
  return true;
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
