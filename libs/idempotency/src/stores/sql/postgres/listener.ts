import type { Client, Pool } from 'pg';
import { IdempotencyStoreUnavailableError } from '../../../core/errors';
import { IdempotencyLogger } from '../../../core/logger';
import { WaiterRegistry } from '../../../core/waiters';
import { withinTimeout } from '../bounded-query';
import { quoteIdent } from '../table';

/**
 * One LISTEN connection per store, opened outside the application's pool so it
 * never takes a pooled connection away. Waiters hold no connection at all:
 * they hold a ticket in `registry`, fired by the notification.
 *
 * If the connection drops, every waiter is woken to look again (nothing is
 * missed), and it reconnects with backoff; meanwhile waiters fall back to polling.
 */
export class PgNotificationListener {
  private client?: Client;
  private connecting?: Promise<boolean>;
  private closed = false;
  private reconnectTimer?: NodeJS.Timeout;
  private reconnectDelayMs = 100;

  constructor(
    private readonly pool: Pool,
    private readonly channel: string,
    private readonly registry: WaiterRegistry,
    private readonly logger: IdempotencyLogger,
    private readonly connectTimeoutMs: number,
  ) {}

  get listening(): boolean {
    return this.client !== undefined;
  }

  /** Resolves true once LISTEN is in effect, false if it could not be set up in time. */
  ensure(): Promise<boolean> {
    if (this.client) return Promise.resolve(true);
    if (this.closed) return Promise.resolve(false);
    this.connecting ??= this.connect().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    this.registry.notifyAll();
    if (client) await client.end().catch(() => undefined);
  }

  private async connect(): Promise<boolean> {
    const PgClient = (this.pool as unknown as { Client: new (options: unknown) => Client }).Client;
    const options = (this.pool as unknown as { options: Record<string, unknown> }).options;
    const client = new PgClient({ ...options, connectionTimeoutMillis: this.connectTimeoutMs });
    client.on('error', () => this.lost(client));
    client.on('end', () => this.lost(client));
    client.on('notification', (message) => {
      if (message.channel === this.channel && message.payload)
        this.registry.notify(message.payload);
    });
    try {
      // Both bounded: a waiter awaits this before its first look, so a server that
      // accepts the connection and then never answers must not hold it forever.
      await client.connect();
      await withinTimeout(
        client.query(`LISTEN ${quoteIdent(this.channel)}`),
        this.connectTimeoutMs,
        'LISTEN',
      );
    } catch (error) {
      client.removeAllListeners('end');
      // Not awaited: ending a connection that stopped answering may never finish,
      // so one that timed out is also dropped at once.
      client.end().catch(() => undefined);
      if (error instanceof IdempotencyStoreUnavailableError) socketOf(client)?.destroy();
      this.logger.debug?.(`LISTEN connection failed: ${(error as Error).message}`);
      this.scheduleReconnect();
      return false;
    }
    if (this.closed) {
      await client.end().catch(() => undefined);
      return false;
    }
    this.client = client;
    this.reconnectDelayMs = 100;
    // Anything that completed while we were not listening: let waiters look again.
    this.registry.notifyAll();
    return true;
  }

  private lost(client: Client): void {
    if (this.client !== client) return;
    this.client = undefined;
    this.registry.notifyAll();
    if (!this.closed) {
      this.logger.warn('LISTEN connection lost; waiting duplicates poll until it is back');
      this.scheduleReconnect();
    }
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnectTimer) return;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      void this.ensure();
    }, this.reconnectDelayMs);
    this.reconnectTimer.unref();
    this.reconnectDelayMs = Math.min(this.reconnectDelayMs * 2, 5000);
  }
}

/** The socket under a `pg` Client (not part of its typed API). */
function socketOf(client: Client): { destroy(): void } | undefined {
  return (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection
    ?.stream;
}
