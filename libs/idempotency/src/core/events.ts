/**
 * One event per edge and outcome, for metrics, traces and operators. Each
 * names the record by its scope and key digest (a purge run, which covers all
 * scopes, by `*`), never by the raw key or a tenant. Emitted synchronously; a
 * listener that throws is logged and ignored.
 */
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
      reason: 'action-failed' | 'answered-early';
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
      during: 'heartbeat' | 'complete' | 'release';
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
