import type { ReceiptOutcome } from './receipts';
import type { AmbiguityReason } from './store';

/**
 * One event per edge and outcome, for metrics, traces and operators. Each
 * names the record by its scope and key digest (a purge run, which covers all
 * scopes, by `*`), never by the raw key or a tenant. Emitted synchronously; a
 * listener that throws is logged and ignored.
 */
/**
 * Why a record was released: the action threw, something answered the caller
 * before it returned, or (transactional completion) the transaction did not commit.
 */
export type ReleaseReason =
  'action-failed' | 'answered-early' | 'commit-failed' | 'resumption-refused';

export type IdempotencyEvent =
  | {
      type: 'acquired';
      scope: string;
      keyDigest: string;
      acquireMs: number;
      /** Taken over from an expired lease (or an expired result), when the store says so. */
      stolen: boolean;
    }
  | { type: 'waited'; scope: string; keyDigest: string; waitedMs: number }
  | { type: 'completed'; scope: string; keyDigest: string; actionMs: number }
  | { type: 'replayed'; scope: string; keyDigest: string; acquireMs: number }
  | { type: 'in-flight'; scope: string; keyDigest: string; retryAfterMs: number; acquireMs: number }
  | { type: 'fingerprint-mismatch'; scope: string; keyDigest: string }
  | {
      type: 'released';
      scope: string;
      keyDigest: string;
      /** Why: the action threw, or something answered the caller before it returned. */
      reason: ReleaseReason;
    }
  | {
      type: 'not-storable';
      scope: string;
      keyDigest: string;
      /** Why the result could not be stored; the record is completed without it. */
      reason: string;
    }
  | {
      type: 'lease-lost';
      scope: string;
      keyDigest: string;
      /** Where the loss was noticed: a refused heartbeat, completion or release. */
      during: 'heartbeat' | 'complete' | 'release' | 'mark-ambiguous';
    }
  | {
      /**
       * Strict mode: the record became AMBIGUOUS: a contender found its lease
       * expired, or the action threw something not known as not executed.
       */
      type: 'ambiguous';
      scope: string;
      keyDigest: string;
      reason: AmbiguityReason;
      /** `step-unknown`: the recorded step that began and recorded nothing. */
      step?: string;
    }
  | {
      /** Strict mode: a caller was refused because the record is AMBIGUOUS. */
      type: 'outcome-unknown';
      scope: string;
      keyDigest: string;
      reason: AmbiguityReason;
      /** `step-unknown`: the recorded step that began and recorded nothing. */
      step?: string;
      acquireMs: number;
    }
  | {
      /**
       * An AMBIGUOUS record was resolved. `completed`: it is COMPLETE with the
       * resolver's result; `not-executed`: it was deleted, so this event (and
       * the CLI's output) is the only trace of the resolution.
       */
      type: 'resolved';
      scope: string;
      keyDigest: string;
      outcome: 'completed' | 'not-executed';
      /** Who: `cli:local` (the CLI), `reconcile` (the hook), or the label of your own caller. */
      resolver: string;
    }
  | {
      /** A `reconcile` hook threw; its answer counts as `unknown` and the caller is refused. */
      type: 'reconcile-failed';
      scope: string;
      keyDigest: string;
      error: string;
    }
  | {
      /** `ctx.step`: the step ran and its value was written into the record. */
      type: 'step-recorded';
      scope: string;
      keyDigest: string;
      /** The step's name, as the handler gave it. */
      step: string;
      /** How long the step's function took, with the write. */
      stepMs: number;
    }
  | {
      /** `ctx.step`: the step was recorded by an earlier attempt; its value was answered, and nothing ran. */
      type: 'step-replayed';
      scope: string;
      keyDigest: string;
      step: string;
    }
  | {
      /** `ctx.suspend`: the record is SUSPENDED, its answer given, for `holdMs`. */
      type: 'suspended';
      scope: string;
      keyDigest: string;
      holdMs: number;
    }
  | {
      /** A duplicate of a SUSPENDED record was answered its suspension (nothing ran). */
      type: 'suspension-replayed';
      scope: string;
      keyDigest: string;
    }
  | {
      /** A resumption was admitted: it holds the suspended record now. */
      type: 'resumed';
      scope: string;
      keyDigest: string;
    }
  | {
      /** A resumption was refused (`reason`); nothing ran. Named by scope: a refused token may name no record. */
      type: 'resumption-refused';
      scope: string;
      reason: 'invalid' | 'unknown' | 'consumed' | 'lapsed';
    }
  | {
      /** Receipts: the record's terminal state was appended to receipt chain `chain`. */
      type: 'receipt-appended';
      scope: string;
      keyDigest: string;
      outcome: ReceiptOutcome;
      chain: number;
    }
  | {
      /** Receipts: the append failed (logged); the caller's request was not failed for it. */
      type: 'receipt-failed';
      scope: string;
      keyDigest: string;
      outcome: ReceiptOutcome;
      error: string;
    }
  | { type: 'completion-retry'; scope: string; keyDigest: string; attempt: number; error: string }
  | { type: 'completion-failed'; scope: string; keyDigest: string; attempts: number; error: string }
  | { type: 'release-failed'; scope: string; keyDigest: string; error: string }
  | {
      /**
       * Observe mode: the handler ran as if there were no idempotency, and this
       * is what enforce mode would have done instead.
       */
      type: 'observed';
      scope: string;
      /** Absent when the request had no usable key. */
      keyDigest?: string;
      wouldHave:
        | 'replayed'
        | 'in-flight'
        | 'fingerprint-mismatch'
        | 'key-missing'
        | 'key-invalid'
        | 'body-unreadable'
        | 'store-unavailable';
    }
  | {
      type: 'purge-run';
      /** Always `*`: a purge covers every scope. */
      scope: '*';
      /** Records deleted, in `batches` batches. */
      purged: number;
      batches: number;
      error?: string;
    };

export type IdempotencyEventListener = (event: IdempotencyEvent) => void;

/** What enforce mode would have done, as an `observed` event reports it. */
export type ObservedOutcome = Extract<IdempotencyEvent, { type: 'observed' }>['wouldHave'];
