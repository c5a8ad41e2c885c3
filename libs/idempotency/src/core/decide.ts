import type {
  AcquireResult,
  AmbiguityReason,
  AmbiguousRecord,
  RecordState,
  ReplayedRecord,
  StoredPayload,
  SuspendedRecord,
} from './store';

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
  /** AMBIGUOUS (strict-mode stores): since when and why. */
  ambiguousSince?: Date | null;
  ambiguousReason?: AmbiguityReason | null;
  /** True when this very look moved the record to AMBIGUOUS. */
  transitioned?: boolean;
  /**
   * IN_PROGRESS and SUSPENDED (stores with continuations): what a duplicate
   * is answered while the hold (the lease, `leaseLeftMs`) runs.
   */
  suspension?: { answer: StoredPayload; continuation: string } | null;
}

/**
 * An IN_PROGRESS record whose lease ran out, or a COMPLETE one past its TTL,
 * is taken by the next caller; in strict mode (`refuse`) an expired lease is
 * not (see `becomesAmbiguous`). An AMBIGUOUS record never is.
 */
export function isStealable(
  state: RecordState,
  leaseLeftMs: number,
  expiresLeftMs: number,
  onExpiredLease: 'steal' | 'refuse' = 'steal',
): boolean {
  if (state === 'AMBIGUOUS') return false;
  if (state === 'IN_PROGRESS') return leaseLeftMs <= 0 && onExpiredLease !== 'refuse';
  return expiresLeftMs <= 0;
}

/** Strict mode: the look that finds an IN_PROGRESS record's lease run out moves it to AMBIGUOUS. */
export function becomesAmbiguous(
  state: RecordState,
  leaseLeftMs: number,
  onExpiredLease: 'steal' | 'refuse' | undefined,
): boolean {
  return state === 'IN_PROGRESS' && leaseLeftMs <= 0 && onExpiredLease === 'refuse';
}

/**
 * COMPLETE past its TTL; IN_PROGRESS only past its TTL and its lease, so a
 * live action is never purged. AMBIGUOUS never: only a resolution ends it.
 */
export function isPurgeable(
  state: RecordState,
  leaseLeftMs: number,
  expiresLeftMs: number,
): boolean {
  if (state === 'AMBIGUOUS') return false;
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
  | AmbiguousRecord
  | SuspendedRecord
  | { kind: 'busy'; retryAfterMs: number };

/**
 * For a record that was not acquired (and not stealable): replay it, refuse a
 * mismatch, say it is AMBIGUOUS or SUSPENDED (at once, while its hold runs),
 * or report it busy. A mismatch comes first: another request under a reused
 * key is told so whatever the record's state.
 */
export function decide(record: ObservedRecord, fingerprint: string | null): Decision {
  if (fingerprintsConflict(fingerprint, record.fingerprint))
    return { kind: 'fingerprint-mismatch' };
  if (record.state === 'AMBIGUOUS') {
    return {
      kind: 'ambiguous',
      since: record.ambiguousSince ?? new Date(0),
      reason: record.ambiguousReason ?? 'lease-expired',
      ...(record.transitioned ? { transitioned: true } : {}),
    };
  }
  if (record.state === 'COMPLETE') {
    return {
      kind: 'duplicate',
      payload: record.payload!,
      completedAt: record.completedAt!,
      expiresInMs: Math.max(0, Math.floor(record.expiresLeftMs)),
      fingerprint: record.fingerprint,
    };
  }
  if (record.suspension && record.leaseLeftMs > 0) {
    return {
      kind: 'suspended',
      answer: record.suspension.answer,
      continuation: record.suspension.continuation,
      holdRemainingMs: Math.ceil(record.leaseLeftMs),
    };
  }
  return { kind: 'busy', retryAfterMs: Math.max(0, Math.ceil(record.leaseLeftMs)) };
}
