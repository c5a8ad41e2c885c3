import { decide, ObservedRecord } from './decide';
import type { AcquireRequest, AcquireResult, Lease } from './store';
import type { WaiterRegistry } from './waiters';

const CHANGES_BEFORE_BACKOFF = 8;

/** What one atomic look at a record found. */
export type Observation =
  | { kind: 'acquired'; lease: Lease; stolen?: boolean }
  | { kind: 'record'; record: ObservedRecord }
  /** The record changed while the look was under way (a stale read): look again at once. */
  | { kind: 'changed' };

export interface WaitForRecordOptions {
  request: AcquireRequest;
  /**
   * One atomic look: insert, steal, or report what is there. `watch` is true
   * when the caller will wait should the record be in flight (a store that
   * wakes waiters only for watched records marks it in the same look).
   */
  look: (watch: boolean) => Promise<Observation>;
  waiters: WaiterRegistry;
  /** The record's id in `waiters`. */
  waiterId: string;
  /** Most tickets parked in this process; one more is answered in flight at once. */
  maxWaiters: number;
  /** The longest single wait before looking again without a wake-up (the fallback poll). */
  pollMs: () => number;
}

/**
 * The wait every built-in store shares: look, and while the record is in
 * flight wait for a wake-up (completion or release), the holder's lease to
 * end, the poll, or the caller's `waitTimeoutMs`, whichever is first.
 *
 * No wake-up is lost to a look: a ticket that waits was taken before its
 * look, or, for the first look (which most calls make alone: the record is
 * absent or completed), taken after it when the registry sent no wake-up at
 * all meanwhile; when it did, the loop looks again with a ticket taken first.
 */
export async function waitForRecord(options: WaitForRecordOptions): Promise<AcquireResult> {
  const { request, look, waiters, waiterId, maxWaiters } = options;
  const willWait = request.waitTimeoutMs > 0;
  // The wait is this caller's own patience, so this process's clock measures it.
  const deadline = Date.now() + request.waitTimeoutMs;
  let changes = 0;
  let waitedMs = 0;
  let ticketFirst = false;
  const answer = <T extends AcquireResult>(result: T): T =>
    waitedMs > 0 ? { ...result, waitedMs } : result;
  for (;;) {
    const notified = waiters.notifications;
    let ticket = willWait && ticketFirst ? waiters.register(waiterId) : undefined;
    try {
      const observed = await look(willWait);
      if (observed.kind === 'acquired') return answer(observed);
      if (observed.kind === 'changed') {
        // A record that keeps changing under the look: look again, at once the first
        // few times, then backing off, so no store can spin on it.
        if (++changes > CHANGES_BEFORE_BACKOFF) {
          const backoffMs = Math.min(options.pollMs(), 2 ** (changes - CHANGES_BEFORE_BACKOFF));
          await new Promise((resolve) => setTimeout(resolve, backoffMs));
        }
        continue;
      }
      changes = 0;
      const decision = decide(observed.record, request.fingerprint);
      if (decision.kind !== 'busy') return answer(decision);
      if (willWait && ticket === undefined) {
        ticketFirst = true;
        ticket = waiters.register(waiterId);
        // A wake-up sent during the look may have been this record's: look again, ticket first.
        if (waiters.notifications !== notified) continue;
      }
      const waitLeftMs = deadline - Date.now();
      // The ticket counts itself: past the cap, answer at once rather than hold one more.
      if (!ticket || waitLeftMs <= 0 || waiters.size > maxWaiters) {
        return answer({ kind: 'in-flight', retryAfterMs: decision.retryAfterMs });
      }
      waiters.waiting(request.scope);
      const waitStarted = performance.now();
      await ticket.wait(Math.min(waitLeftMs, decision.retryAfterMs + 1, options.pollMs()));
      waitedMs += performance.now() - waitStarted;
    } finally {
      ticket?.dispose();
    }
  }
}
