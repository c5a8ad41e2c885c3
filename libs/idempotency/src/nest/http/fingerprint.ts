import { hash } from 'node:crypto';
import stringify from 'safe-stable-stringify';

/** SHA-256 of the method and route and the body's canonical JSON (key order does not matter). */
export function requestFingerprint(route: string, body: unknown): string {
  // One-shot hash: the same digest as hashing the parts in turn, without a Hash object per request.
  return hash('sha256', `${route}\n${stringify(body ?? null) ?? ''}`);
}
