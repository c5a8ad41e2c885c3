/** Most scopes `AcquireOrder` follows; past it, the one it has followed longest is forgotten. */
const ORDER_SCOPES = 1024;
/** Weight of the newest acquisition in a scope's average: about the last 8 count. */
const ORDER_WEIGHT = 1 / 8;

/**
 * Which statement an acquisition sends first, per scope: a read-only peek when
 * most recent acquisitions in the scope found a record there (replays,
 * duplicates in flight), the writing statement when most found none (fresh
 * keys). A moving average of what first looks found, starting at "none". Either
 * order reaches the same outcome; the guess only decides whether a look takes
 * one statement or two. Shared by the PostgreSQL and MySQL dialects.
 */
export class AcquireOrder {
  private readonly found = new Map<string, number>();

  peekFirst(scope: string): boolean {
    return (this.found.get(scope) ?? 0) > 0.5;
  }

  /** `found`: the acquisition's first look found a record (each dialect says which count). */
  observe(scope: string, found: boolean): void {
    const before = this.found.get(scope);
    if (before === undefined && this.found.size >= ORDER_SCOPES) {
      this.found.delete(this.found.keys().next().value!);
    }
    const average = before ?? 0;
    this.found.set(scope, average + ((found ? 1 : 0) - average) * ORDER_WEIGHT);
  }
}
