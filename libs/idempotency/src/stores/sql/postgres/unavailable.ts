import { IdempotencyStoreUnavailableError } from '../../../core/errors';

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'EAI_AGAIN',
]);
// SQLSTATE classes 08 (connection exception), 57P (operator intervention: shutdown, restart), 53300 (too many connections).
const UNAVAILABLE_SQLSTATE = /^(08|57P)|^53300$/;
const UNAVAILABLE_MESSAGE =
  /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Cannot use a pool after calling end|not queryable/i;

/** True when an error from the driver means "the database cannot be reached right now". */
export function isUnavailable(error: unknown): boolean {
  if (error instanceof IdempotencyStoreUnavailableError) return true;
  const candidate = error as { code?: unknown; message?: unknown; driverError?: unknown } | null;
  if (!candidate || typeof candidate !== 'object') return false;
  if (
    candidate.driverError &&
    candidate.driverError !== error &&
    isUnavailable(candidate.driverError)
  )
    return true;
  const code = typeof candidate.code === 'string' ? candidate.code : '';
  if (NETWORK_CODES.has(code) || UNAVAILABLE_SQLSTATE.test(code)) return true;
  return typeof candidate.message === 'string' && UNAVAILABLE_MESSAGE.test(candidate.message);
}
