import type { RedisClientPort, RedisNode } from './client.port';
import { keySlot } from './key-slot';
import type {
  RedisArgument,
  RedisClusterSubscriber,
  RedisStandaloneSubscriber,
} from './redis-client';

/*
 * The slice of ioredis 5 the store uses, written out structurally (as
 * ./redis-client.ts does for node-redis): this file loads nothing from
 * `ioredis`, and a `Redis` or `Cluster` of the application's fits as it is.
 */

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- EventEmitter's own listener type
type AnyListener = (...args: any[]) => void;

interface IoredisCommon {
  /** `wait` (lazyConnect, not yet used), `connecting`, `connect`, `ready`, `reconnecting`, `close`, `end`. */
  readonly status: string;
  readonly options: { enableAutoPipelining?: boolean };
  readonly isCluster: boolean;
  callBuffer(command: string, ...args: Array<string | Buffer | number>): Promise<unknown>;
  connect(): Promise<void>;
  disconnect(reconnect?: boolean): void;
  on(event: string | symbol, listener: AnyListener): unknown;
}

/** An ioredis `Redis` (a standalone server, or one node of a Cluster). */
export interface IoredisStandaloneClient extends IoredisCommon {
  readonly options: {
    keyPrefix?: string;
    host?: string;
    port?: number;
    enableAutoPipelining?: boolean;
  };
  duplicate(override?: Record<string, unknown>): IoredisStandaloneClient;
  subscribe(...channels: string[]): Promise<unknown>;
}

/** An ioredis `Cluster`. */
export interface IoredisClusterClient extends IoredisCommon {
  readonly options: {
    keyPrefix?: string;
    redisOptions?: { keyPrefix?: string };
    enableAutoPipelining?: boolean;
    /** Where ioredis sends read-only commands: 'master' (its default), 'slave', 'all' or a function. */
    scaleReads?: unknown;
  };
  /** Slot → the keys (`host:port`) of its master, then its replicas. */
  readonly slots: ReadonlyArray<ReadonlyArray<string> | undefined>;
  nodes(role?: 'all' | 'master' | 'slave'): IoredisStandaloneClient[];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- ioredis types the seed nodes `any[]`
  duplicate(startupNodes?: any[], options?: Record<string, unknown>): IoredisClusterClient;
  ssubscribe(...channels: string[]): Promise<unknown>;
  sunsubscribe(...channels: string[]): Promise<unknown>;
}

export type IoredisClient = IoredisStandaloneClient | IoredisClusterClient;

/** An ioredis client: `callBuffer` and a `status`. */
export function isIoredis(client: object): client is IoredisClient {
  return (
    typeof (client as IoredisCommon).callBuffer === 'function' &&
    typeof (client as IoredisCommon).status === 'string'
  );
}

function isIoredisCluster(client: IoredisClient): client is IoredisClusterClient {
  return client.isCluster === true;
}

/** A `keyPrefix` ioredis would put in front of the store's keys (but not of the keys SCAN returns). */
export function ioredisKeyPrefix(client: IoredisClient): string | undefined {
  const options = client.options as IoredisClusterClient['options'];
  return options?.keyPrefix || options?.redisOptions?.keyPrefix || undefined;
}

const nodeKey = (node: IoredisStandaloneClient) => `${node.options.host}:${node.options.port}`;

type BufferCommand = (...args: RedisArgument[]) => Promise<unknown>;

/**
 * One command, its bulk strings answered as Buffers. With `enableAutoPipelining`
 * on, ioredis 5 queues a `callBuffer` on its pipeline without the command's
 * name (redis/ioredis#1923: the server is sent the first argument as the
 * command, and answers "ERR unknown command"), so the command's own Buffer
 * method (`evalshaBuffer`, `infoBuffer`…) is called instead, which ioredis
 * pipelines whole.
 */
function sendBuffer(
  target: IoredisCommon,
  name: RedisArgument,
  rest: RedisArgument[],
): Promise<unknown> {
  if (!target.options.enableAutoPipelining) return target.callBuffer(String(name), ...rest);
  const method = bufferMethodOf(name);
  const send = (target as unknown as Record<string, unknown>)[method];
  if (typeof send === 'function') return (send as BufferCommand).apply(target, rest);
  return Promise.reject(
    new Error(
      `this ioredis has no ${method} method, and the store cannot send ${String(name)} through callBuffer on a client with enableAutoPipelining`,
    ),
  );
}

/** A command's own Buffer method: `EVALSHA` → `evalshaBuffer`. */
const bufferMethodOf = (name: RedisArgument) => `${String(name).toLowerCase()}Buffer`;

/** Every command the store sends (./redis.store.ts, ./receipts.ts, ./client.ts). */
const STORE_COMMANDS = [
  'DEL',
  'EVAL',
  'EVALSHA',
  'GET',
  'HMGET',
  'INFO',
  'LRANGE',
  'PING',
  'SCAN',
  'SCRIPT',
  'SET',
  'WAIT',
];

/**
 * The Buffer methods the store would call under `enableAutoPipelining` (see
 * `sendBuffer`) that this client lacks: none on ioredis 5, checked when the
 * store is made so that a client without them fails at bootstrap.
 */
export function missingBufferMethods(client: IoredisClient): string[] {
  if (!client.options?.enableAutoPipelining) return [];
  const methods = client as unknown as Record<string, unknown>;
  return STORE_COMMANDS.map(bufferMethodOf).filter(
    (method) => typeof methods[method] !== 'function',
  );
}

/**
 * The store's reads by key. Named in lower case (as the Buffer methods name
 * them), ioredis counts them read-only, and a Cluster whose `scaleReads` is not
 * 'master' sends them to a replica, which may not have the write just before
 * them yet (the bootstrap's byte check reads what it wrote; receipts read their
 * chain's head); under their upper-case names (`callBuffer`) they go to masters.
 */
const KEYED_READS = new Set(['GET', 'HMGET', 'LRANGE']);

/**
 * ioredis 5 behind the store's client port. Every command is `callBuffer`, or
 * the command's own Buffer method under auto-pipelining (bulk strings as
 * Buffers either way; ioredis speaks RESP2); on a Cluster ioredis routes
 * a command by the keys it finds in it (EVALSHA's, HMGET's…) and follows
 * MOVED and ASK itself, and re-reads its slot map on a failover by itself.
 * A standalone client that lost its connection after it was first ready is
 * not sent commands until it is ready again: ioredis would hold them in its
 * offline queue and send them after the reconnection, long after the store
 * gave up on them (an acquire the caller was told failed would then take a
 * lease nobody holds). One already written may still run, as on node-redis.
 */
export class IoredisAdapter implements RedisClientPort {
  readonly library = 'ioredis' as const;
  readonly cluster: boolean;
  /** Ready once: from then on, not ready means reconnecting (before it, still connecting at startup). */
  private wasReady = false;
  /** A Cluster that would send the store's reads to replicas: they go to the key's master instead. */
  private readonly readsToMaster: boolean;

  constructor(private readonly client: IoredisClient) {
    this.cluster = isIoredisCluster(client);
    this.readsToMaster =
      isIoredisCluster(client) &&
      client.options.enableAutoPipelining === true &&
      (client.options.scaleReads ?? 'master') !== 'master';
    if (client.status === 'ready') this.wasReady = true;
    else client.on('ready', () => (this.wasReady = true));
  }

  get isOpen(): boolean {
    return this.client.status !== 'end';
  }

  get isReady(): boolean | undefined {
    return this.client.status === 'ready';
  }

  send(
    key: string | undefined,
    args: ReadonlyArray<RedisArgument>,
    _timeoutMs: number,
  ): Promise<unknown> {
    const client = this.client;
    if (!this.cluster && this.wasReady && client.status !== 'ready') {
      return Promise.reject(new IoredisNotReadyError(client.status));
    }
    const [name, ...rest] = args;
    // WAIT names no key: ioredis would send it to any node, not to the one that took the write.
    // A read ioredis would send to a replica (see KEYED_READS) goes to the key's master too.
    if (isIoredisCluster(client) && key !== undefined && this.toMaster(String(name))) {
      const owner = client.slots[keySlot(key)]?.[0];
      const master = client.nodes('master').find((node) => nodeKey(node) === owner);
      if (!master) return Promise.reject(new Error(`no known master holds the slot of ${key}`));
      return sendBuffer(master, name, rest);
    }
    return sendBuffer(client, name, rest);
  }

  private toMaster(name: string): boolean {
    const upper = name.toUpperCase();
    return upper === 'WAIT' || (this.readsToMaster && KEYED_READS.has(upper));
  }

  async masters(): Promise<RedisNode[]> {
    const client = this.client;
    const nodes = isIoredisCluster(client) ? client.nodes('master') : [client];
    return nodes.map((node) => ({
      send: (args) => {
        const [name, ...rest] = args;
        return sendBuffer(node, name, rest);
      },
    }));
  }

  /** ioredis re-reads the slot map by itself when a node is lost or a command is redirected. */
  unanswered(): void {}

  subscriber(): RedisStandaloneSubscriber {
    const client = this.client as IoredisStandaloneClient;
    // Connected by the store when it first subscribes; subscriptions renewed after a reconnection.
    return new IoredisSubscriber(client.duplicate({ lazyConnect: true, autoResubscribe: true }));
  }

  shardedSubscriber(): RedisClusterSubscriber {
    const client = this.client as IoredisClusterClient;
    return new IoredisShardedSubscriber(
      client.duplicate([], { lazyConnect: true, shardedSubscribers: true }),
    );
  }

  /** callBuffer hands every bulk string back as a Buffer. */
  bytesProblem(): string | undefined {
    return undefined;
  }

  describe(): string | undefined {
    return this.cluster ? 'ioredis (Cluster)' : 'ioredis';
  }
}

/** A command not sent: the client is reconnecting (see IoredisAdapter). An unavailable store to callers. */
export class IoredisNotReadyError extends Error {
  constructor(status: string) {
    super(`the ioredis client is ${status}, not ready (the command was not queued)`);
    this.name = 'IoredisNotReadyError';
  }
}

type Listener = (message: string, channel: string) => unknown;

/** Delivers each channel's messages to the listeners subscribed to it. */
class Listeners {
  private readonly byChannel = new Map<string, Set<Listener>>();

  add(channel: string, listener: Listener): void {
    let set = this.byChannel.get(channel);
    if (!set) this.byChannel.set(channel, (set = new Set()));
    set.add(listener);
  }

  /** True when nobody listens to the channel any more. */
  remove(channel: string, listener: Listener): boolean {
    const set = this.byChannel.get(channel);
    set?.delete(listener);
    if (set && set.size > 0) return false;
    this.byChannel.delete(channel);
    return true;
  }

  deliver = (channel: string, message: string): void => {
    this.byChannel.get(channel)?.forEach((listener) => listener(message, channel));
  };
}

/** The store's duplicate of a standalone ioredis client, shaped as the wake-ups expect. */
class IoredisSubscriber implements RedisStandaloneSubscriber {
  private readonly listeners = new Listeners();

  constructor(private readonly redis: IoredisStandaloneClient) {
    redis.on('message', this.listeners.deliver);
  }

  get isOpen(): boolean {
    return this.redis.status !== 'end';
  }

  get isReady(): boolean {
    return this.redis.status === 'ready';
  }

  connect(): Promise<unknown> {
    return this.redis.connect();
  }

  destroy(): void {
    this.redis.disconnect();
  }

  async subscribe(channel: string, listener: Listener): Promise<void> {
    this.listeners.add(channel, listener);
    await this.redis.subscribe(channel);
  }

  /** `error`, `end` and `ready` mean for ioredis what they mean for node-redis. */
  on(event: string, listener: AnyListener): this {
    this.redis.on(event, listener);
    return this;
  }
}

/**
 * The store's Cluster client for sharded pub/sub (`shardedSubscribers: true`:
 * one subscriber connection per master, SSUBSCRIBE sent to the master of the
 * channel's slot, subscriptions moved by ioredis when the slot map changes).
 */
class IoredisShardedSubscriber implements RedisClusterSubscriber {
  private readonly listeners = new Listeners();

  constructor(private readonly cluster: IoredisClusterClient) {
    cluster.on('smessage', this.listeners.deliver);
  }

  get isOpen(): boolean {
    return this.cluster.status !== 'end';
  }

  connect(): Promise<unknown> {
    return this.cluster.connect();
  }

  destroy(): void {
    this.cluster.disconnect();
  }

  async sSubscribe(channel: string, listener: Listener): Promise<void> {
    this.listeners.add(channel, listener);
    await this.cluster.ssubscribe(channel);
  }

  async sUnsubscribe(channel: string, listener: Listener): Promise<void> {
    if (this.listeners.remove(channel, listener)) await this.cluster.sunsubscribe(channel);
  }

  /** node-redis's Cluster events, told by ioredis's sharded-subscriber group under other names. */
  on(event: string, listener: AnyListener): this {
    const names: Record<string, string[]> = {
      error: ['error'],
      'node-error': ['node error', 'nodeError'],
      'node-reconnecting': ['-subscriber'],
      'node-ready': ['subscribersReady'],
    };
    for (const name of names[event] ?? []) this.cluster.on(name, listener);
    return this;
  }
}
