import { createHash } from 'node:crypto';
import stringify from 'safe-stable-stringify';

/** SHA-256 of the method and route and the body's canonical JSON (key order does not matter). */
export function requestFingerprint(route: string, body: unknown): string {
  return createHash('sha256')
    .update(route)
    .update('\n')
    .update(stringify(body ?? null) ?? '')
    .digest('hex');
}
