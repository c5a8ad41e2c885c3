/**
 * Wake-ups for duplicates waiting on a record, keyed by an opaque record
 * identifier. A ticket is taken *before* the store looks at the record, so a
 * notification that arrives while the look is in progress is not lost.
 */
export class WaiterRegistry {
  private readonly tickets = new Map<string, Set<WaitTicket>>();
  private readonly waitListeners = new Set<(scope: string) => void>();
  private count = 0;

  /** Subscribes to "a duplicate starts waiting" (see `IdempotencyStore.onWait`); returns the unsubscribe. */
  onWait(listener: (scope: string) => void): () => void {
    this.waitListeners.add(listener);
    return () => this.waitListeners.delete(listener);
  }

  /** Called by the wait loop right before a ticket waits. */
  waiting(scope: string): void {
    for (const listener of this.waitListeners) listener(scope);
  }

  register(id: string): WaitTicket {
    const ticket = new WaitTicket(() => this.remove(id, ticket));
    let set = this.tickets.get(id);
    if (!set) {
      set = new Set();
      this.tickets.set(id, set);
    }
    set.add(ticket);
    this.count++;
    return ticket;
  }

  notify(id: string): void {
    const set = this.tickets.get(id);
    if (set) for (const ticket of set) ticket.fire();
  }

  notifyAll(): void {
    for (const set of this.tickets.values()) for (const ticket of set) ticket.fire();
  }

  /** Tickets held right now. */
  get size(): number {
    return this.count;
  }

  private remove(id: string, ticket: WaitTicket): void {
    const set = this.tickets.get(id);
    if (!set || !set.delete(ticket)) return;
    this.count--;
    if (set.size === 0) this.tickets.delete(id);
  }
}

export class WaitTicket {
  private fired = false;
  private wake?: () => void;

  constructor(private readonly onDispose: () => void) {}

  fire(): void {
    this.fired = true;
    this.wake?.();
  }

  /** Resolves true when notified, false when `ms` passed first. */
  wait(ms: number): Promise<boolean> {
    if (this.fired) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(
        () => {
          this.wake = undefined;
          resolve(false);
        },
        Math.max(0, ms),
      );
      this.wake = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve(true);
      };
    });
  }

  dispose(): void {
    this.wake = undefined;
    this.onDispose();
  }
}
