/**
 * Wake-ups for duplicates waiting on a record, keyed by an opaque record
 * identifier. A ticket that waits was taken *before* the store's look, or
 * after a look during which no wake-up was sent at all, so a notification
 * that arrives while the look is in progress is not lost.
 */
export class WaiterRegistry {
  /** A record's tickets: one ticket alone (the usual case, no Set made for it), or a Set of them. */
  private readonly tickets = new Map<string, WaitTicket | Set<WaitTicket>>();
  private readonly waitListeners = new Set<(scope: string) => void>();
  private count = 0;
  /**
   * Wake-ups sent so far, to any record. A look made without a ticket is
   * trusted to wait on only when this did not move during it (see `waitForRecord`).
   */
  notifications = 0;

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
    const ticket = new WaitTicket(this, id);
    const held = this.tickets.get(id);
    if (held === undefined) this.tickets.set(id, ticket);
    else if (held instanceof Set) held.add(ticket);
    else this.tickets.set(id, new Set([held, ticket]));
    this.count++;
    return ticket;
  }

  notify(id: string): void {
    this.notifications++;
    const held = this.tickets.get(id);
    if (held === undefined) return;
    if (held instanceof Set) for (const ticket of held) ticket.fire();
    else held.fire();
  }

  notifyAll(): void {
    this.notifications++;
    for (const held of this.tickets.values()) {
      if (held instanceof Set) for (const ticket of held) ticket.fire();
      else held.fire();
    }
  }

  /** Tickets held right now. */
  get size(): number {
    return this.count;
  }

  /** @internal A ticket's `dispose` (not for other callers). */
  remove(id: string, ticket: WaitTicket): void {
    const held = this.tickets.get(id);
    if (held === ticket) {
      this.tickets.delete(id);
    } else if (held instanceof Set && held.delete(ticket)) {
      if (held.size === 0) this.tickets.delete(id);
    } else {
      return;
    }
    this.count--;
  }
}

export class WaitTicket {
  private fired = false;
  private wake?: () => void;

  constructor(
    private readonly registry: WaiterRegistry,
    private readonly id: string,
  ) {}

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
    this.registry.remove(this.id, this);
  }
}
