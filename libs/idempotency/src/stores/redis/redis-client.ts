/**
 * The slice of node-redis (the `redis` package, v5 and v6) the store uses,
 * written out structurally so that this entry point loads nothing from the
 * package at run time and its declarations name none of its types: a client
 * from `createClient()` or `createCluster()` (of `redis` or `@redis/client`,
 * with any modules, scripts or RESP version) fits as it is.
 */
export type RedisArgument = string | Buffer;

export interface RedisCommandOptions {
  /** RESP type byte → JavaScript type; the store asks for bulk strings as Buffers. */
  typeMapping?: Record<number, unknown>;
  /** node-redis drops a command still queued after this many milliseconds. */
  timeout?: number;
}

type Listener = (message: string, channel: string) => unknown;

interface Evented {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- EventEmitter's own listener type
  on(event: string, listener: (...args: any[]) => void): unknown;
}

/** What a standalone client (`createClient()`) offers. */
export interface RedisStandaloneClient extends Evented {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  sendCommand(args: ReadonlyArray<RedisArgument>, options?: RedisCommandOptions): Promise<unknown>;
  duplicate(): RedisStandaloneSubscriber;
}

/** The connection the store opens for itself with `duplicate()`. */
export interface RedisStandaloneSubscriber extends Evented {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  connect(): Promise<unknown>;
  destroy(): void;
  subscribe(channels: string, listener: Listener): Promise<void>;
}

/** What a Cluster client (`createCluster()`) offers. */
export interface RedisClusterClient extends Evented {
  readonly isOpen: boolean;
  /** node-redis 6; absent in 5. */
  readonly isReady?: boolean;
  readonly masters: ReadonlyArray<object>;
  sendCommand(
    firstKey: RedisArgument | undefined,
    isReadonly: boolean | undefined,
    args: ReadonlyArray<RedisArgument>,
    options?: RedisCommandOptions,
  ): Promise<unknown>;
  /** A promise in node-redis 6, the client itself in 5. */
  nodeClient(
    node: never,
  ):
    | Pick<RedisStandaloneClient, 'sendCommand'>
    | Promise<Pick<RedisStandaloneClient, 'sendCommand'>>;
  duplicate(overrides?: { minimizeConnections?: boolean }): RedisClusterSubscriber;
}

/** The Cluster client the store opens for its sharded subscriptions. */
export interface RedisClusterSubscriber extends Evented {
  readonly isOpen: boolean;
  connect(): Promise<unknown>;
  destroy(): void;
  sSubscribe(channels: string, listener: Listener): Promise<void>;
  sUnsubscribe(channels: string, listener: Listener): Promise<void>;
}

/** The application's client: standalone or Cluster. The store never connects, closes or reconfigures it. */
export type RedisIdempotencyClient = RedisStandaloneClient | RedisClusterClient;
