import type { IdempotencyLogger } from '../../../core/logger';
import type { WaiterRegistry } from '../../../core/waiters';

/** Most record ids one poll statement asks about; more are split over several statements. */
export const POLL_BATCH = 500;
/** The first check of a record comes this soon after a duplicate starts waiting on it. */
export const FIRST_POLL_MS = 4;
/**
 * A poll also asks about every record due within this much of it (at least
 * FIRST_POLL_MS, a quarter of the longest gap), so that records whose checks
 * fall at different instants share statements: waiters that have waited a while
 * cost about one statement per window for the whole instance (one per POLL_BATCH
 * records), however many they are; a stream of new waiters, one per FIRST_POLL_MS.
 */
const coalesceMs = (maxGapMs: number) => Math.max(FIRST_POLL_MS, maxGapMs / 4);
/** After a failed poll, the next one waits this long (the waiters' own fallback poll goes on). */
const FAILED_POLL_DELAY_MS = 250;

/** The current lease of each record asked about that still exists (null: COMPLETE). */
export type PollRecords = (
  ids: Buffer[],
) => Promise<Array<{ id: Buffer; lease_id: string | null }>>;

/** One waiting duplicate's view of a record, as its last look saw it. */
export interface WakeWatch {
  /** The look saw the record IN_PROGRESS under `leaseId`: wake this waiter once that changes. */
  observe(leaseId: string): void;
  /** The duplicate stopped waiting (answered, acquired, or gave up). */
  dispose(): void;
}

interface Watched {
  readonly id: Buffer;
  readonly idHex: string;
  /** Each waiter's last seen lease; undefined until it looked, and again once woken. */
  readonly watches: Map<WakeWatch, string | undefined>;
  /** The lease last seen on this record; a different one starts the backoff over. */
  lease?: string;
  gapMs: number;
  dueAt: number;
}

/**
 * Wakes this instance's waiting duplicates when another instance completes,
 * releases or steals the record they wait on. MySQL has no LISTEN/NOTIFY, so
 * the instance asks, in one statement for all of them, for the current lease
 * of every record its duplicates wait on, and wakes those whose record no
 * longer holds the lease they saw (a wake-up on this instance itself comes at
 * once from the store, without this).
 *
 * A record is first checked FIRST_POLL_MS after a duplicate starts waiting on
 * it, then at doubling gaps up to `maxGapMs`: a short action is noticed within
 * a few milliseconds, a long one within `maxGapMs`. Records due at nearby
 * instants share one statement (see `coalesceMs`), so the cost is bounded per
 * instance, not per waiter. Nothing is polled while nobody waits.
 */
export class WakePoller {
  private readonly records = new Map<string, Watched>();
  private timer?: NodeJS.Timeout;
  private timerAt = Infinity;
  private polling = false;
  private closed = false;

  constructor(
    private readonly poll: PollRecords,
    private readonly waiters: WaiterRegistry,
    private readonly logger: IdempotencyLogger,
    private readonly maxGapMs: number,
  ) {}

  /** Records being watched right now (for tests and metrics). */
  get size(): number {
    return this.records.size;
  }

  watch(id: Buffer, idHex: string): WakeWatch {
    let watched = this.records.get(idHex);
    if (!watched) {
      watched = { id, idHex, watches: new Map(), gapMs: this.firstGapMs, dueAt: Infinity };
      this.records.set(idHex, watched);
    }
    const record = watched;
    const watch: WakeWatch = {
      observe: (leaseId) => {
        if (this.closed || !record.watches.has(watch)) return;
        record.watches.set(watch, leaseId);
        if (record.lease !== leaseId) {
          record.lease = leaseId;
          record.gapMs = this.firstGapMs;
          record.dueAt = performance.now() + record.gapMs;
        } else if (record.dueAt === Infinity) {
          record.dueAt = performance.now() + record.gapMs;
        }
        this.schedule();
      },
      dispose: () => {
        record.watches.delete(watch);
        if (record.watches.size === 0 && this.records.get(record.idHex) === record) {
          this.records.delete(record.idHex);
        }
      },
    };
    watched.watches.set(watch, undefined);
    return watch;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.records.clear();
  }

  private get firstGapMs(): number {
    return Math.min(FIRST_POLL_MS, this.maxGapMs);
  }

  private schedule(): void {
    if (this.closed || this.polling) return;
    let next = Infinity;
    for (const record of this.records.values()) {
      if (record.dueAt < next && hasObserved(record)) next = record.dueAt;
    }
    if (next === Infinity) {
      clearTimeout(this.timer);
      this.timer = undefined;
      this.timerAt = Infinity;
      return;
    }
    if (this.timer && this.timerAt <= next) return;
    clearTimeout(this.timer);
    this.timerAt = next;
    this.timer = setTimeout(() => void this.tick(), Math.max(0, next - performance.now()));
    // Waiters keep the process alive with their own timers; this one needs not.
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    this.timer = undefined;
    this.timerAt = Infinity;
    if (this.closed) return;
    this.polling = true;
    try {
      const horizon = performance.now() + coalesceMs(this.maxGapMs);
      const due = [...this.records.values()].filter(
        (record) => record.dueAt <= horizon && hasObserved(record),
      );
      for (let start = 0; start < due.length; start += POLL_BATCH) {
        const batch = due.slice(start, start + POLL_BATCH);
        let rows: Array<{ id: Buffer; lease_id: string | null }>;
        try {
          rows = await this.poll(batch.map((record) => record.id));
        } catch (error) {
          this.logger.debug?.(`wake-up poll failed: ${(error as Error).message}`);
          for (const record of batch) record.dueAt = performance.now() + FAILED_POLL_DELAY_MS;
          continue;
        }
        if (this.closed) return;
        const current = new Map(rows.map((row) => [row.id.toString('hex'), row.lease_id]));
        for (const record of batch) this.settle(record, current.get(record.idHex));
      }
    } finally {
      this.polling = false;
      this.schedule();
    }
  }

  /** `lease`: the record's lease now; null when COMPLETE, undefined when it is gone. */
  private settle(record: Watched, lease: string | null | undefined): void {
    let changed = false;
    for (const [watch, seen] of record.watches) {
      if (seen === undefined || seen === lease) continue;
      // Woken once: the waiter looks again and reports what it sees then.
      record.watches.set(watch, undefined);
      changed = true;
    }
    if (changed) {
      // Waiters that already saw the new lease go on being watched, from the start of the backoff.
      record.lease = lease ?? undefined;
      record.gapMs = this.firstGapMs;
      record.dueAt = hasObserved(record) ? performance.now() + record.gapMs : Infinity;
      this.waiters.notify(record.idHex);
      return;
    }
    record.gapMs = Math.min(record.gapMs * 2, this.maxGapMs);
    record.dueAt = performance.now() + record.gapMs;
  }
}

function hasObserved(record: Watched): boolean {
  for (const seen of record.watches.values()) if (seen !== undefined) return true;
  return false;
}
