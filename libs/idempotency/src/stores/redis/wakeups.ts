import { IdempotencyLogger } from '../../core/logger';
import { WaiterRegistry } from '../../core/waiters';
import type { RedisClientPort } from './client.port';
import type { RedisClusterSubscriber, RedisStandaloneSubscriber } from './redis-client';
import type { RecordNames } from './keys';

/**
 * How waiting duplicates hear of a completion or a release: one subscriber
 * connection of the store's own (never the application's client, whose
 * connection a subscription would take over), opened on the first wait.
 * Waiters hold no connection: a ticket in the WaiterRegistry, fired by the
 * message, which carries the record's id.
 *
 * `watch` is called before the look that marks the record watched, and
 * resolves once the subscription is in effect, so a message published after
 * the mark cannot be missed. If the subscriber is down, waiters poll (the
 * store shortens the poll while `healthy` is false) and everyone is woken
 * to look again when it is back.
 */
export interface Wakeups {
  /** Subscribed and connected: a wake-up for a watched record would arrive. */
  readonly healthy: boolean;
  /** A look for this record may mark it watched: its wake-up would reach this process. */
  isActive(names: RecordNames): boolean;
  /** Subscribes for this record (if needed); false when that failed or took too long. */
  watch(names: RecordNames): Promise<boolean>;
  /** The waiter that called `watch` is done. */
  unwatch(names: RecordNames): void;
  close(): Promise<void>;
}

async function within<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      work,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Standalone: plain pub/sub, one channel for the whole prefix
 * (`<prefix>w`), subscribed once. Every instance on the prefix hears every
 * wake-up, and only wake-ups of watched records are ever published.
 */
export class StandaloneWakeups implements Wakeups {
  private subscriber?: RedisStandaloneSubscriber;
  private subscribing?: Promise<boolean>;
  private subscribed = false;

  constructor(
    private readonly port: RedisClientPort,
    private readonly channel: string,
    private readonly registry: WaiterRegistry,
    private readonly logger: IdempotencyLogger,
    private readonly timeoutMs: number,
  ) {}

  get healthy(): boolean {
    return this.subscribed && this.subscriber?.isReady === true;
  }

  isActive(): boolean {
    return this.healthy;
  }

  watch(): Promise<boolean> {
    if (this.healthy) return Promise.resolve(true);
    this.subscribing ??= this.subscribe().finally(() => (this.subscribing = undefined));
    return this.subscribing;
  }

  unwatch(): void {}

  async close(): Promise<void> {
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    this.subscribed = false;
    subscriber?.destroy();
    this.registry.notifyAll();
  }

  private async subscribe(): Promise<boolean> {
    let subscriber = this.subscriber;
    try {
      if (!subscriber || !subscriber.isOpen) {
        subscriber = this.port.subscriber();
        this.subscriber = subscriber;
        this.subscribed = false;
        const current = subscriber;
        // Unheard, a connection error event would crash the process.
        current.on('error', (error: Error) => {
          if (this.subscriber === current)
            this.logger.debug?.(`Redis subscriber connection: ${error.message}`);
        });
        current.on('end', () => {
          if (this.subscriber === current) this.registry.notifyAll();
        });
        // node-redis and ioredis reconnect and subscribe again by themselves; whatever was published
        // meanwhile was missed, so every waiter looks again.
        current.on('ready', () => {
          if (this.subscriber === current && this.subscribed) this.registry.notifyAll();
        });
        await within(current.connect(), this.timeoutMs);
      }
      if (!this.subscribed) {
        await within(
          subscriber.subscribe(this.channel, (message) => this.registry.notify(message)),
          this.timeoutMs,
        );
        this.subscribed = true;
      }
      return this.healthy;
    } catch (error) {
      this.logger.warn(
        `Redis subscriber could not subscribe (${(error as Error).message}); waiting duplicates poll`,
      );
      if (this.subscriber === subscriber && !this.subscribed) {
        this.subscriber = undefined;
        subscriber?.destroy();
      }
      return false;
    }
  }
}

interface Watched {
  count: number;
  subscribed: boolean;
  ready: Promise<boolean>;
}

/**
 * Cluster: sharded pub/sub. A record's wake-up goes to its own channel
 * (`<prefix>w:{<id>}`, the record's slot), published by SPUBLISH on the
 * shard that holds the record, and heard only by processes that subscribed
 * to it: this one subscribes while a duplicate here waits on the record.
 * The subscriber is a Cluster client of the store's own (the client port's
 * `shardedSubscriber()`): a connection per shard it has subscriptions on,
 * moved by the client library when a slot moves.
 */
export class ClusterWakeups implements Wakeups {
  private subscriber?: RedisClusterSubscriber;
  private connecting?: Promise<RedisClusterSubscriber>;
  private readonly watched = new Map<string, Watched>();
  private troubled = false;
  private readonly listener = (message: string) => this.registry.notify(message);

  constructor(
    private readonly port: RedisClientPort,
    private readonly registry: WaiterRegistry,
    private readonly logger: IdempotencyLogger,
    private readonly timeoutMs: number,
  ) {}

  get healthy(): boolean {
    return this.subscriber !== undefined && !this.troubled;
  }

  isActive(names: RecordNames): boolean {
    return this.healthy && this.watched.get(names.id)?.subscribed === true;
  }

  watch(names: RecordNames): Promise<boolean> {
    let entry = this.watched.get(names.id);
    if (!entry) {
      const created: Watched = { count: 0, subscribed: false, ready: Promise.resolve(false) };
      created.ready = this.subscribeTo(names.channel).then((ok) => (created.subscribed = ok));
      entry = created;
      this.watched.set(names.id, entry);
    }
    entry.count++;
    return entry.ready;
  }

  unwatch(names: RecordNames): void {
    const entry = this.watched.get(names.id);
    if (!entry || --entry.count > 0) return;
    this.watched.delete(names.id);
    const subscriber = this.subscriber;
    void entry.ready.then((subscribed) => {
      // A new waiter may have subscribed again meanwhile: it holds the listener now.
      if (!subscribed || !subscriber || this.watched.has(names.id)) return;
      subscriber.sUnsubscribe(names.channel, this.listener).catch(() => undefined);
    });
  }

  async close(): Promise<void> {
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    this.watched.clear();
    subscriber?.destroy();
    this.registry.notifyAll();
  }

  private async subscribeTo(channel: string): Promise<boolean> {
    try {
      const subscriber = await this.connect();
      await within(subscriber.sSubscribe(channel, this.listener), this.timeoutMs);
      return true;
    } catch (error) {
      this.logger.warn(
        `Redis sharded subscription failed (${(error as Error).message}); waiting duplicates poll`,
      );
      return false;
    }
  }

  private connect(): Promise<RedisClusterSubscriber> {
    if (this.subscriber?.isOpen) return Promise.resolve(this.subscriber);
    this.connecting ??= (async () => {
      const subscriber = this.port.shardedSubscriber();
      subscriber.on('error', (error: Error) =>
        this.logger.debug?.(`Redis subscriber: ${error.message}`),
      );
      subscriber.on('node-error', (error: Error) =>
        this.logger.debug?.(`Redis subscriber node: ${error.message}`),
      );
      subscriber.on('node-reconnecting', () => {
        if (this.subscriber !== subscriber) return;
        this.troubled = true;
        this.registry.notifyAll();
      });
      subscriber.on('node-ready', () => {
        if (this.subscriber !== subscriber || !this.troubled) return;
        // Subscribed again by node-redis; what was published meanwhile was missed.
        this.troubled = false;
        this.registry.notifyAll();
      });
      subscriber.on('sharded-channel-moved-error', () => {
        if (this.subscriber === subscriber) this.troubled = true;
      });
      try {
        await within(subscriber.connect(), this.timeoutMs);
      } catch (error) {
        subscriber.destroy();
        throw error;
      }
      this.subscriber = subscriber;
      this.troubled = false;
      return subscriber;
    })().finally(() => (this.connecting = undefined));
    return this.connecting;
  }
}
