import { Client } from 'pg';

/**
 * Round trips, counted in the driver: every `pg` `Client.query` call, attributed
 * to a connection's `application_name`, so the benchmark can tell the store's
 * pool, a second instance and the raw-SQL floor apart.
 */
const counts = new Map<string, number>();
let installed = false;

type CountedClient = Client & { connectionParameters?: { application_name?: string } };

export function installDriverCounter(): void {
  if (installed) return;
  installed = true;
  const prototype = Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = prototype.query;
  prototype.query = function (this: CountedClient, ...args: unknown[]) {
    const app = this.connectionParameters?.application_name ?? '?';
    counts.set(app, (counts.get(app) ?? 0) + 1);
    return original.apply(this, args);
  };
}

/** `Client.query` calls made so far on connections named `app`. */
export function queriesOf(app: string): number {
  return counts.get(app) ?? 0;
}
