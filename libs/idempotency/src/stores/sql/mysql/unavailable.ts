import { IdempotencyStoreUnavailableError } from '../../../core/errors';

const UNAVAILABLE_CODES = new Set([
  // The network.
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  // mysql2's own: the connection broke, or the server stopped answering.
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'PROTOCOL_ENQUEUE_AFTER_FATAL_ERROR',
  'PROTOCOL_ENQUEUE_AFTER_QUIT',
  // The server refuses work for now: too many connections, shutting down, a
  // connection killed, a read-only server (a replica during a failover), a row
  // lock that did not come within innodb_lock_wait_timeout.
  'ER_CON_COUNT_ERROR',
  'ER_TOO_MANY_USER_CONNECTIONS',
  'ER_SERVER_SHUTDOWN',
  'ER_CONNECTION_KILLED',
  'ER_OPTION_PREVENTS_STATEMENT',
  'ER_LOCK_WAIT_TIMEOUT',
]);
const UNAVAILABLE_ERRNOS = new Set([1040, 1203, 1053, 1927, 1290, 1205, 2002, 2003, 2006, 2013]);
const UNAVAILABLE_MESSAGE =
  /Pool is closed|connection is in closed state|Connection lost|Can't add new command when connection is in closed state/i;

/** True when an error from mysql2 means "the database cannot be reached or cannot take work right now". */
export function isMysqlUnavailable(error: unknown): boolean {
  if (error instanceof IdempotencyStoreUnavailableError) return true;
  const candidate = error as {
    code?: unknown;
    errno?: unknown;
    fatal?: unknown;
    message?: unknown;
    driverError?: unknown;
  } | null;
  if (!candidate || typeof candidate !== 'object') return false;
  if (
    candidate.driverError &&
    candidate.driverError !== error &&
    isMysqlUnavailable(candidate.driverError)
  )
    return true;
  // A fatal error is one that broke the connection itself.
  if (candidate.fatal === true) return true;
  if (typeof candidate.code === 'string' && UNAVAILABLE_CODES.has(candidate.code)) return true;
  if (typeof candidate.errno === 'number' && UNAVAILABLE_ERRNOS.has(candidate.errno)) return true;
  if (error instanceof AggregateError && error.errors.some(isMysqlUnavailable)) return true;
  return typeof candidate.message === 'string' && UNAVAILABLE_MESSAGE.test(candidate.message);
}

/** Deadlock (1213) or a lock wait given up: for an acquisition, the row changed under it; look again. */
export function isLockConflict(error: unknown): boolean {
  const candidate = error as { code?: unknown; errno?: unknown } | null;
  return candidate?.code === 'ER_LOCK_DEADLOCK' || candidate?.errno === 1213;
}
