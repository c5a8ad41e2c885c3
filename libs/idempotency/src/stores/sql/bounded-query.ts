import type { DataSource } from 'typeorm';
import { IdempotencyStoreUnavailableError } from '../../core/errors';

/**
 * Settles like `work`, unless `timeoutMs` passes first: then it rejects with
 * `IdempotencyStoreUnavailableError`. `work` itself is not cancelled.
 */
export async function withinTimeout<T>(
  work: Promise<T>,
  timeoutMs: number,
  operation: string,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new IdempotencyStoreUnavailableError(
            `PostgreSQL did not answer ${operation} within ${timeoutMs} ms`,
          ),
        ),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * One statement through the DataSource, given up after `timeoutMs` (waiting for
 * a pooled connection included) with `IdempotencyStoreUnavailableError`. The
 * statement itself is not cancelled on the server.
 */
export function boundedQuery<T>(
  dataSource: DataSource,
  timeoutMs: number,
  operation: string,
  sql: string,
  params: unknown[] = [],
): Promise<T[]> {
  return withinTimeout(dataSource.query(sql, params) as Promise<T[]>, timeoutMs, operation);
}

const noop = () => undefined;

export interface Deadline {
  readonly at: number;
  /** Dropped at `settle`: a settled deadline may wait in the queue behind an older one. */
  expire: () => void;
  settled: boolean;
  next?: Deadline;
}

/**
 * Bounds many calls by one fixed `timeoutMs` with one timer between them, not
 * one timer per call: deadlines are queued in the order they were set, which
 * for a fixed timeout is also the order they fall due, so only the head needs
 * a timer. A settled call leaves the queue as soon as everything before it has
 * settled too; the timer, once armed, is re-armed only when it fires (unref'd:
 * it never keeps a process alive on its own).
 *
 * A deadline that leaves the queue lets go of the next one: callers keep
 * theirs in closures, and some closures live on (`pg` keeps the callback of
 * the call that opened a pooled connection for as long as the connection),
 * so a linked deadline would hold every later one, without end.
 */
export class Deadlines {
  private head?: Deadline;
  private tail?: Deadline;
  private timer?: NodeJS.Timeout;

  constructor(readonly timeoutMs: number) {}

  /** Settles like `work`, unless `timeoutMs` passes first: then it rejects with `timedOut()`. */
  bound<T>(work: Promise<T>, timedOut: () => Error): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const deadline = this.add(() => reject(timedOut()));
      work.then(
        (value) => {
          if (this.settle(deadline)) resolve(value);
        },
        (error: unknown) => {
          if (this.settle(deadline)) reject(error);
        },
      );
    });
  }

  /** Starts a deadline: `expire` is called once `timeoutMs` has passed, unless `settle` came first. */
  add(expire: () => void): Deadline {
    const deadline: Deadline = {
      at: performance.now() + this.timeoutMs,
      expire,
      settled: false,
      next: undefined,
    };
    if (this.tail) this.tail.next = deadline;
    else this.head = deadline;
    this.tail = deadline;
    if (!this.timer) this.arm(this.timeoutMs);
    return deadline;
  }

  /** Ends a deadline; false when it had already expired (the call was given up). */
  settle(deadline: Deadline): boolean {
    if (deadline.settled) return false;
    deadline.settled = true;
    // It may stay queued behind an older, slower call: let go of what its closure holds
    // (the statement's values, the caller's promise) now.
    deadline.expire = noop;
    while (this.head?.settled) this.dequeue();
    return true;
  }

  /** Takes the head off the queue, unlinked from the rest. */
  private dequeue(): Deadline {
    const head = this.head!;
    this.head = head.next;
    head.next = undefined;
    if (!this.head) this.tail = undefined;
    return head;
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => this.fire(), Math.max(1, Math.ceil(ms)));
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    const now = performance.now();
    while (this.head && (this.head.settled || this.head.at <= now)) {
      const due = this.dequeue();
      if (!due.settled) {
        due.settled = true;
        const expire = due.expire;
        due.expire = noop;
        expire();
      }
    }
    if (this.head) this.arm(this.head.at - now);
  }
}
