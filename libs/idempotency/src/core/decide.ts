import type { AcquireResult, RecordState, ReplayedRecord, StoredPayload } from './store';

/**
 * The rules every store applies, written once. Stores that decide in their
 * own language (SQL, Lua) state the same rules there; the conformance kit
 * checks that they agree.
 */

/** A record as one atomic look at it saw it, with times relative to the store's clock. */
export interface ObservedRecord {
  state: RecordState;
  fingerprint: string | null;
  /** IN_PROGRESS: time left on the holder's lease (≤ 0 once it ran out). */
  leaseLeftMs: number;
  /** Time left until the TTL ends (≤ 0 once it ran out). */
  expiresLeftMs: number;
  /** COMPLETE: the stored payload. */
  payload: StoredPayload | null;
  completedAt: Date | null;
}

/** An IN_PROGRESS record whose lease ran out, or a COMPLETE one past its TTL, is taken by the next caller. */
export function isStealable(
  state: RecordState,
  leaseLeftMs: number,
  expiresLeftMs: number,
): boolean {
  return state === 'IN_PROGRESS' ? leaseLeftMs <= 0 : expiresLeftMs <= 0;
}

/** COMPLETE past its TTL; IN_PROGRESS only past its TTL and its lease, so a live action is never purged. */
export function isPurgeable(
  state: RecordState,
  leaseLeftMs: number,
  expiresLeftMs: number,
): boolean {
  return expiresLeftMs <= 0 && (state === 'COMPLETE' || leaseLeftMs <= 0);
}

/** Two fingerprints conflict only when both sides carry one and they differ. */
export function fingerprintsConflict(requested: string | null, stored: string | null): boolean {
  return requested !== null && stored !== null && requested !== stored;
}

/** What a caller that did not get the record is told: a replay, a mismatch, or that it is still in flight. */
export type Decision =
  | ReplayedRecord
  | Extract<AcquireResult, { kind: 'fingerprint-mismatch' }>
  | { kind: 'busy'; retryAfterMs: number };

/** For a record that was not acquired (and not stealable): replay it, refuse a mismatch, or report it busy. */
export function decide(record: ObservedRecord, fingerprint: string | null): Decision {
  if (fingerprintsConflict(fingerprint, record.fingerprint))
    return { kind: 'fingerprint-mismatch' };
  if (record.state === 'COMPLETE') {
    return {
      kind: 'duplicate',
      payload: record.payload!,
      completedAt: record.completedAt!,
      expiresInMs: Math.max(0, Math.floor(record.expiresLeftMs)),
      fingerprint: record.fingerprint,
    };
  }
  return { kind: 'busy', retryAfterMs: Math.max(0, Math.ceil(record.leaseLeftMs)) };
}
