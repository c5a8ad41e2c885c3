import { randomUUID } from 'node:crypto';
import {
  IdempotencyConfigError,
  IdempotencyLeaseLostError,
  IdempotencyStoreSchemaError,
} from '../../core/errors';
import { PROBE_BYTES, PROBE_TTL_MS, probeMismatch } from '../../core/byte-probe';
import { storedKeyDigest } from '../../core/key';
import { IdempotencyLogger } from '../../core/logger';
import { optionKeys, refuseUnknownOptions } from '../../core/option-keys';
import { assertPayloadSize, DEFAULT_MAX_PAYLOAD_BYTES } from '../../core/payload';
import {
  checkAcquireRequest,
  checkLease,
  checkListFilter,
  checkPayload,
  checkPurgeOptions,
  checkRecordId,
  checkResolution,
  checkResumeRequest,
  checkStepName,
  checkSuspension,
} from '../../core/store-input';
import {
  AcquireRequest,
  AcquireResult,
  AmbiguityReason,
  ContinuationSupport,
  DEFAULT_MAX_WAITERS,
  IdempotencyRecordView,
  IdempotencyStore,
  Lease,
  ListFilter,
  RecordId,
  RecordedStep,
  RecordState,
  Resolution,
  ResolveResult,
  ResumeRequest,
  ResumeResult,
  StoredPayload,
  StepSupport,
  StrictModeSupport,
  Suspension,
} from '../../core/store';
import { Observation, waitForRecord } from '../../core/wait-loop';
import { WaiterRegistry } from '../../core/waiters';
import { fingerprintsConflict } from '../../core/decide';
import {
  adaptRedisClient,
  isNoScript,
  RedisClusterClient,
  RedisCommands,
  RedisIdempotencyClient,
  RedisStandaloneClient,
} from './client';
import type { RedisClientLibrary } from './client.port';
import { DEFAULT_KEY_PREFIX, RecordNames, RedisKeys } from './keys';
import { RedisReceipts } from './receipts';
import { SUPPORTED_NODE_REDIS } from './node-redis.adapter';
import {
  ACQUIRE,
  COMPLETE,
  EXTEND,
  MARK_AMBIGUOUS,
  RedisScript,
  RELEASE,
  RESOLVE,
  RESUME,
  STEP_BEGIN,
  STEP_RECORD,
  SCRIPTS,
  SUSPEND,
  VIEW,
} from './scripts';
import { ClusterWakeups, StandaloneWakeups, Wakeups } from './wakeups';
import { createOwnedConnection, OwnedRedisConnection, RedisConnectionOptions } from './from-url';

export interface RedisIdempotencyStoreOptions {
  /**
   * Prefix of every key and channel. Stores (or applications) sharing a Redis
   * keep apart by prefix. No `{` or `}`: the store sets the hash tag. Default `idempotency:`.
   */
  keyPrefix?: string;
  /** Largest stored result the store accepts, in bytes. Default 1 MiB. */
  maxPayloadBytes?: number;
  /** Most duplicates parked waiting in this process at once; one more is answered `in-flight` at once. Default 10,000. */
  maxWaiters?: number;
  /** Bound on any one store call (queued while the client reconnects included). Default 2000 ms. */
  operationTimeoutMs?: number;
  /** Fallback poll for waiting duplicates when a wake-up is missed. Default 1000 ms. */
  pollIntervalMs?: number;
  /**
   * After `complete` and `release`, send `WAIT replicas timeoutMs` on the
   * same connection, so the call returns once that many replicas have the
   * write (or the timeout passed: then the store logs a warning and returns,
   * since the write itself succeeded). Costs a second round trip and the
   * replication delay; see docs/redis.md. Default: off.
   */
  waitForReplicas?: { replicas: number; timeoutMs: number };
  /**
   * Prove at `init()` that a payload comes back byte for byte (0x00, 0xff,
   * invalid UTF-8), with a short-lived key of its own, deleted afterwards.
   * Default true. Off, `init()` writes nothing: for read-only tools (the CLI's
   * reads) and read-only logins.
   */
  byteProbe?: boolean;
  logger?: IdempotencyLogger;
}

/** Every key of `RedisIdempotencyStoreOptions` (`tsc` fails when the two disagree); any other is refused. */
export const REDIS_STORE_OPTION_KEYS = optionKeys<RedisIdempotencyStoreOptions>()([
  'keyPrefix',
  'maxPayloadBytes',
  'maxWaiters',
  'operationTimeoutMs',
  'pollIntervalMs',
  'waitForReplicas',
  'byteProbe',
  'logger',
]);

const WAIT_FOR_REPLICAS_KEYS = optionKeys<
  NonNullable<RedisIdempotencyStoreOptions['waitForReplicas']>
>()(['replicas', 'timeoutMs']);

/** `RedisIdempotencyStore.fromUrl`'s options: the store's, and how to connect. */
export type RedisIdempotencyStoreFromUrlOptions = RedisIdempotencyStoreOptions &
  RedisConnectionOptions;

export const REDIS_FROM_URL_OPTION_KEYS = optionKeys<RedisIdempotencyStoreFromUrlOptions>()([
  ...(REDIS_STORE_OPTION_KEYS as RedisStoreOptionKey[]),
  'cluster',
  'connectTimeoutMs',
  'clientOptions',
]);
type RedisStoreOptionKey = keyof RedisIdempotencyStoreOptions;

/** The lease a Redis store hands out: the record's names, computed once at acquisition. */
/**
 * A lease on a record's hash. It names its record by scope and key (never
 * logged): the digest a log line shows is computed only then (`storedKeyDigest`).
 */
interface RedisLease extends Lease {
  readonly names: RecordNames;
  readonly scope: string;
  readonly key: string;
}

/** What `awaitReplicas` names in its warnings. */
type ReplicatedRecord = Pick<RedisLease, 'names' | 'scope' | 'key'>;

/** The oldest servers the store accepts: SCAN … TYPE needs 6.0; sharded pub/sub needs 7.0. */
const MIN_STANDALONE: [number, number] = [6, 2];
const MIN_CLUSTER: [number, number] = [7, 0];
const SCAN_COUNT = '1000';

/**
 * Redis store, standalone or Redis Cluster, on node-redis (`redis`) or
 * ioredis (see ./client.port.ts for the boundary between them): each
 * transition is one Lua script (see ./scripts.ts), waiters are woken by
 * pub/sub (sharded on a Cluster), and Redis expires records itself. See
 * docs/redis.md for the layout, the round trips and what survives a restart
 * or a failover.
 *
 * The client is the application's: the store never connects or closes it
 * (unless the store made it itself, with `fromUrl`). It opens one connection
 * of its own (per shard on a Cluster) for its subscriptions, on the first
 * wait, and closes it in `close()`.
 */
export class RedisIdempotencyStore<
  Client extends RedisIdempotencyClient = RedisIdempotencyClient,
> implements IdempotencyStore {
  readonly keys: RedisKeys;
  private readonly commands: RedisCommands;
  /** Receipts: a list and a head per chain, under this store's prefix (see ./receipts.ts). */
  readonly receipts: RedisReceipts;
  private readonly waiters = new WaiterRegistry();
  private readonly wakeups: Wakeups;
  private readonly maxPayloadBytes: number;
  private readonly maxWaiters: number;
  private readonly timeoutMs: number;
  private readonly pollIntervalMs: number;
  private readonly replicas?: { replicas: number; timeoutMs: number };
  private readonly logger: IdempotencyLogger;
  private readonly publish: 'PUBLISH' | 'SPUBLISH';
  private readonly byteProbe: boolean;
  private ready?: Promise<void>;
  /** Strict mode: AMBIGUOUS records are kept with no expiry (PERSIST) until resolved. */
  readonly strictMode: StrictModeSupport = {
    markAmbiguous: (lease, reason) => this.markAmbiguous(lease, reason),
    resolve: (id, resolution) => this.resolve(id, resolution),
  };
  /** Recorded steps: fields `t:<name>` of the record's own hash (one key, one slot). */
  readonly steps: StepSupport = {
    begin: async (lease, name) => {
      checkLease(lease, 'steps.begin');
      checkStepName(name, 'steps.begin');
      const { names, leaseId } = lease as RedisLease;
      const reply = (await this.script('steps.begin', STEP_BEGIN, names.key, [leaseId, name])) as [
        number,
        Buffer?,
      ];
      if (Number(reply[0]) === 0) throw stepLeaseLost('steps.begin');
      return stepValue(reply[1]!);
    },
    record: async (lease, name, value) => {
      checkLease(lease, 'steps.record');
      checkStepName(name, 'steps.record');
      checkPayload(value, 'steps.record');
      assertPayloadSize(value, this.maxPayloadBytes);
      const { names, leaseId } = lease as RedisLease;
      const outcome = await this.script('steps.record', STEP_RECORD, names.key, [
        leaseId,
        name,
        value,
      ]);
      if (Number(outcome) === 0) throw stepLeaseLost('steps.record');
      if (this.replicas) await this.awaitReplicas('steps.record', lease as RedisLease);
    },
    list: async (id) => {
      checkRecordId(id, 'steps.list');
      const reply = (await this.script(
        'steps.list',
        VIEW,
        this.keys.record(id.scope, id.key).key,
        [],
      )) as Buffer[] | null;
      if (!reply) return [];
      const steps: RecordedStep[] = [];
      let complete = false;
      for (let i = 0; i + 1 < reply.length; i += 2) {
        const field = text(reply[i]);
        if (field === 'st') complete = text(reply[i + 1]) === 'COMPLETE';
        if (field.startsWith('t:')) {
          steps.push({ name: field.slice(2), value: stepValue(reply[i + 1]) });
        }
      }
      if (complete) return [];
      return steps.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    },
  };
  /**
   * Continuations: fields `cn`, `sa`, `ss` of the record's own hash; a
   * resumption finds the record by scope and locator (`RedisKeys.recordAt`).
   */
  readonly continuations: ContinuationSupport = {
    suspend: (lease, suspension) => this.suspend(lease, suspension),
    resume: (request) => this.resume(request),
  };
  /** Set by `fromUrl`: the client is the store's own, connected by `init()` and closed by `close()`. */
  private owned?: OwnedRedisConnection;

  /**
   * A store on a client of its own, created from a `redis://` or `rediss://`
   * URL (or, with `cluster: true`, a Cluster's seed nodes): `init()` connects
   * it (bounded by `connectTimeoutMs`) and `close()` closes it. The Nest module
   * calls both; `IdempotencyModule.forRoot({ store: { redis: { url } } })` calls
   * this. Loads the `redis` package, and fails with `IdempotencyConfigError`
   * when it is missing or the URL is not a Redis URL (the message never
   * contains the URL).
   */
  static fromUrl(
    url: string | readonly string[],
    options: RedisIdempotencyStoreFromUrlOptions = {},
  ): RedisIdempotencyStore<RedisStandaloneClient | RedisClusterClient> {
    refuseUnknownOptions(options, REDIS_FROM_URL_OPTION_KEYS, 'RedisIdempotencyStore.fromUrl');
    const { cluster, connectTimeoutMs, clientOptions, ...storeOptions } = options;
    const logger = storeOptions.logger ?? defaultLogger();
    const owned = createOwnedConnection(url, { cluster, connectTimeoutMs, clientOptions }, logger);
    const store = new RedisIdempotencyStore<RedisStandaloneClient | RedisClusterClient>(
      owned.client,
      { ...storeOptions, logger },
    );
    store.owned = owned;
    return store;
  }

  constructor(
    readonly client: Client,
    options: RedisIdempotencyStoreOptions = {},
  ) {
    const port = adaptRedisClient(client);
    refuseUnknownOptions(options, REDIS_STORE_OPTION_KEYS, 'RedisIdempotencyStore');
    refuseUnknownOptions(
      options.waitForReplicas,
      WAIT_FOR_REPLICAS_KEYS,
      'RedisIdempotencyStore',
      'waitForReplicas.',
    );
    this.keys = new RedisKeys(options.keyPrefix ?? DEFAULT_KEY_PREFIX);
    this.maxPayloadBytes = positive(
      'maxPayloadBytes',
      options.maxPayloadBytes,
      DEFAULT_MAX_PAYLOAD_BYTES,
    );
    this.maxWaiters = positive('maxWaiters', options.maxWaiters, DEFAULT_MAX_WAITERS);
    this.timeoutMs = positive('operationTimeoutMs', options.operationTimeoutMs, 2000);
    this.pollIntervalMs = positive('pollIntervalMs', options.pollIntervalMs, 1000);
    if (options.waitForReplicas) {
      const { replicas, timeoutMs } = options.waitForReplicas;
      positive('waitForReplicas.replicas', replicas, 1);
      if (!Number.isInteger(replicas)) {
        throw new IdempotencyConfigError(
          `RedisIdempotencyStore: waitForReplicas.replicas must be a whole number, got ${replicas}`,
        );
      }
      positive('waitForReplicas.timeoutMs', timeoutMs, 1);
      this.replicas = { replicas, timeoutMs };
    }
    this.logger = options.logger ?? defaultLogger();
    this.byteProbe = options.byteProbe ?? true;
    this.commands = new RedisCommands(port, this.timeoutMs);
    this.receipts = new RedisReceipts(this.commands, this.keys.prefix);
    if (port.cluster) {
      this.publish = 'SPUBLISH';
      this.wakeups = new ClusterWakeups(port, this.waiters, this.logger, this.timeoutMs);
    } else {
      this.publish = 'PUBLISH';
      this.wakeups = new StandaloneWakeups(
        port,
        this.keys.wakeChannel,
        this.waiters,
        this.logger,
        this.timeoutMs,
      );
    }
  }

  /** True when the client is a Cluster client (sharded pub/sub, SCAN on every master). */
  get cluster(): boolean {
    return this.commands.cluster;
  }

  /** The library of the client the store runs on: `node-redis` (also what `fromUrl` creates) or `ioredis`. */
  get clientLibrary(): RedisClientLibrary {
    return this.commands.port.library;
  }

  /**
   * Checks the server version on every master and loads the scripts there, so
   * a wrong setup shows at startup. Optional: the other calls do not wait for
   * it (a missing script is sent again on NOSCRIPT).
   */
  init(): Promise<void> {
    this.ready ??= (async () => {
      await this.owned?.connect();
      await this.prepare();
    })().catch((error) => {
      this.ready = undefined;
      throw error;
    });
    return this.ready;
  }

  /**
   * Closes the store's subscriber connection and wakes waiters. The
   * application's client stays open; a client the store created itself
   * (`fromUrl`) is closed too.
   */
  async close(): Promise<void> {
    this.ready = undefined;
    await this.wakeups.close();
    this.waiters.notifyAll();
    await this.owned?.close();
  }

  onWait(listener: (scope: string) => void): () => void {
    return this.waiters.onWait(listener);
  }

  /**
   * PING, within `operationTimeoutMs`: on a Cluster, every master must answer.
   * `IdempotencyStoreUnavailableError` when one does not, or when the client
   * is not open (a `fromUrl` store before `init()`, or after `close()`).
   */
  ping(): Promise<void> {
    return this.commands.ping();
  }

  async tryAcquire(given: AcquireRequest): Promise<AcquireResult> {
    const request = checkAcquireRequest(given);
    const names = this.keys.record(request.scope, request.key);
    const leaseId = randomUUID();
    const lease: RedisLease = {
      leaseId,
      leaseMs: request.leaseMs,
      ttlMs: request.ttlMs,
      names,
      scope: request.scope,
      key: request.key,
    };
    const hasFingerprint = request.fingerprint !== null;
    let watching = false;
    try {
      return await waitForRecord({
        request,
        waiters: this.waiters,
        waiterId: names.id,
        maxWaiters: this.maxWaiters,
        // Without a subscription a wake-up can be missed: look again sooner.
        pollMs: () =>
          this.wakeups.healthy ? this.pollIntervalMs : Math.min(this.pollIntervalMs, 100),
        look: async (watch): Promise<Observation> => {
          // Mark the record watched only once its wake-up would reach us.
          const marking = watch && this.wakeups.isActive(names);
          const reply = (await this.script('acquire', ACQUIRE, names.key, [
            request.scope,
            request.key,
            leaseId,
            String(request.leaseMs),
            String(request.ttlMs),
            hasFingerprint ? '1' : '0',
            request.fingerprint ?? '',
            marking ? '1' : '0',
            request.onExpiredLease === 'refuse' ? '1' : '0',
          ])) as Array<Buffer | null>;
          if (text(reply[0]) === 'acquired') {
            return { kind: 'acquired', lease, stolen: text(reply[1]) === '1' };
          }
          const state = text(reply[1]) as RecordState;
          const fingerprint = reply[2] === null ? null : text(reply[2]);
          // A SUSPENDED record answers at once: nothing to wait for.
          const suspended = state === 'IN_PROGRESS' && isPresent(reply[10]);
          if (
            watch &&
            !marking &&
            !watching &&
            state === 'IN_PROGRESS' &&
            !suspended &&
            !fingerprintsConflict(request.fingerprint, fingerprint)
          ) {
            // This caller is about to wait: subscribe first, then look again and mark.
            // If subscribing fails, it waits on the (shortened) poll instead.
            watching = true;
            if (await this.wakeups.watch(names)) return { kind: 'changed' };
          }
          return {
            kind: 'record',
            record: {
              state,
              fingerprint,
              payload: reply[3],
              completedAt: reply[4] === null ? null : dateOf(text(reply[4])),
              leaseLeftMs: Number(text(reply[5])),
              expiresLeftMs: Number(text(reply[6])),
              ...(state === 'AMBIGUOUS'
                ? {
                    ambiguousSince: dateOf(text(reply[7])),
                    ambiguousReason: text(reply[8]) as AmbiguityReason,
                    transitioned: text(reply[9]) === '1',
                  }
                : {}),
              ...(suspended
                ? { suspension: { answer: reply[10]!, continuation: text(reply[11]) } }
                : {}),
            },
          };
        },
      });
    } finally {
      if (watching) this.wakeups.unwatch(names);
    }
  }

  async complete(lease: Lease, payload: StoredPayload): Promise<void> {
    checkLease(lease, 'complete');
    checkPayload(payload, 'complete');
    assertPayloadSize(payload, this.maxPayloadBytes);
    const { names, leaseId, ttlMs } = lease as RedisLease;
    const outcome = await this.script('complete', COMPLETE, names.key, [
      leaseId,
      payload,
      String(ttlMs),
      ...this.wakeArgs(names),
    ]);
    if (Number(outcome) === 0) {
      throw new IdempotencyLeaseLostError(
        'complete refused: the record is no longer held under this lease',
      );
    }
    if (this.replicas) await this.awaitReplicas('complete', lease as RedisLease);
  }

  async release(lease: Lease): Promise<void> {
    checkLease(lease, 'release');
    const { names, leaseId } = lease as RedisLease;
    const outcome = await this.script('release', RELEASE, names.key, [
      leaseId,
      ...this.wakeArgs(names),
    ]);
    if (Number(outcome) === 0) {
      throw new IdempotencyLeaseLostError(
        'release refused: the record is no longer held under this lease',
      );
    }
    if (this.replicas) await this.awaitReplicas('release', lease as RedisLease);
  }

  private async suspend(lease: Lease, suspension: Suspension): Promise<void> {
    checkLease(lease, 'continuations.suspend');
    checkSuspension(suspension);
    const { continuation, answer, state, holdMs } = suspension;
    // Answer and state are kept together in one record: they count as one payload.
    assertPayloadSize(Buffer.concat([answer, state]), this.maxPayloadBytes);
    const { names, leaseId } = lease as RedisLease;
    const outcome = await this.script('continuations.suspend', SUSPEND, names.key, [
      leaseId,
      randomUUID(),
      continuation,
      answer,
      state,
      String(holdMs),
      ...this.wakeArgs(names),
    ]);
    if (Number(outcome) === 0) {
      throw new IdempotencyLeaseLostError(
        'continuations.suspend refused: the record is no longer held under this lease',
      );
    }
    if (this.replicas) await this.awaitReplicas('continuations.suspend', lease as RedisLease);
  }

  private async resume(request: ResumeRequest): Promise<ResumeResult> {
    checkResumeRequest(request);
    const { scope, locator, continuation, leaseMs, ttlMs } = request;
    const names = this.keys.recordAt(scope, locator);
    const leaseId = randomUUID();
    const reply = (await this.script('continuations.resume', RESUME, names.key, [
      scope,
      continuation,
      leaseId,
      String(leaseMs),
      String(ttlMs),
    ])) as Array<Buffer | null>;
    const kind = text(reply[0]);
    if (kind !== 'admitted') return { kind: kind as 'consumed' | 'lapsed' | 'unknown' };
    const key = text(reply[1]);
    const lease: RedisLease = { leaseId, leaseMs, ttlMs, names, scope, key };
    if (this.replicas) await this.awaitReplicas('continuations.resume', lease);
    return { kind: 'admitted', lease, id: { scope, key }, state: reply[2] ?? Buffer.alloc(0) };
  }

  private async markAmbiguous(lease: Lease, reason: AmbiguityReason): Promise<void> {
    checkLease(lease, 'markAmbiguous');
    const { names, leaseId } = lease as RedisLease;
    const outcome = await this.script('markAmbiguous', MARK_AMBIGUOUS, names.key, [
      leaseId,
      reason,
      ...this.wakeArgs(names),
    ]);
    if (Number(outcome) === 0) {
      throw new IdempotencyLeaseLostError(
        'markAmbiguous refused: the record is no longer held under this lease',
      );
    }
    if (this.replicas) await this.awaitReplicas('markAmbiguous', lease as RedisLease);
  }

  private async resolve(id: RecordId, resolution: Resolution): Promise<ResolveResult> {
    checkResolution(id, resolution);
    const completed = resolution.outcome === 'completed';
    if (completed) assertPayloadSize(resolution.payload, this.maxPayloadBytes);
    const names = this.keys.record(id.scope, id.key);
    const reply = (await this.script('resolve', RESOLVE, names.key, [
      resolution.outcome,
      completed ? resolution.payload : '',
      completed ? String(resolution.ttlMs) : '0',
      resolution.resolvedBy,
    ])) as Array<Buffer | null>;
    if (text(reply[0]) !== 'resolved') {
      return {
        kind: 'not-ambiguous',
        state: reply[1] === null || reply[1] === undefined ? null : (text(reply[1]) as RecordState),
      };
    }
    const resolvedAt = dateOf(text(reply[1]));
    if (this.replicas) {
      await this.awaitReplicas('resolve', { names, scope: id.scope, key: id.key });
    }
    return { kind: 'resolved', resolvedAt };
  }

  async extend(lease: Lease): Promise<boolean> {
    checkLease(lease, 'extend');
    const { names, leaseId, leaseMs } = lease as RedisLease;
    const outcome = await this.script('extend', EXTEND, names.key, [leaseId, String(leaseMs)]);
    return Number(outcome) === 1;
  }

  /**
   * Redis deletes every record itself once it is purgeable (each key expires
   * at the later of its TTL and its lease), so there is never anything left
   * to purge: returns 0 without a round trip.
   */
  async purgeExpired(options: { limit?: number } = {}): Promise<number> {
    checkPurgeOptions(options);
    return 0;
  }

  async find(id: RecordId): Promise<IdempotencyRecordView | null> {
    checkRecordId(id, 'find');
    return this.view(this.keys.record(id.scope, id.key).key);
  }

  /**
   * SCAN (COUNT 1000 a step, never KEYS) over every master, with a MATCH
   * pattern for the scope when there is one; each match's scope, state and
   * creation time are read (HMGET, pipelined), the newest `limit` kept, and
   * those read in full. Cost grows with the keys in the database, not with
   * the answer: an operator's tool, not a request path.
   */
  async list(filter: ListFilter = {}): Promise<IdempotencyRecordView[]> {
    checkListFilter(filter);
    const limit = filter.limit ?? 100;
    if (limit <= 0) return [];
    const pattern = this.keys.pattern(filter.scope);
    const seen = new Set<string>();
    let newest: Array<{ key: string; created: number }> = [];
    for (const node of await this.commands.masters('list')) {
      let cursor = '0';
      do {
        const [next, found] = (await this.commands.sendTo(node, 'list', [
          'SCAN',
          cursor,
          'MATCH',
          pattern,
          'COUNT',
          SCAN_COUNT,
          'TYPE',
          'hash',
        ])) as [Buffer, Buffer[]];
        cursor = text(next);
        const keys = found.map(text);
        const fresh = keys.filter((key) => !seen.has(key));
        fresh.forEach((key) => seen.add(key));
        const heads = (await Promise.all(
          fresh.map((key) => this.commands.send('list', key, ['HMGET', key, 's', 'st', 'c'])),
        )) as Array<[Buffer | null, Buffer | null, Buffer | null]>;
        fresh.forEach((key, i) => {
          const [scope, state, created] = heads[i].map((v) => (v === null ? null : text(v)));
          if (scope === null || created === null) return; // expired meanwhile, or not ours
          if (filter.scope !== undefined && scope !== filter.scope) return;
          if (filter.state !== undefined && state !== filter.state) return;
          newest.push({ key, created: Number(created) });
        });
        if (newest.length > limit * 2) newest = keepNewest(newest, limit);
      } while (cursor !== '0');
    }
    const views = await Promise.all(keepNewest(newest, limit).map(({ key }) => this.view(key)));
    // Read again after the scan: keep only what still matches.
    return views
      .filter((view): view is IdempotencyRecordView => view !== null)
      .filter((view) => filter.scope === undefined || view.scope === filter.scope)
      .filter((view) => filter.state === undefined || view.state === filter.state)
      .sort((a, b) => createdOf(b) - createdOf(a));
  }

  private async view(key: string): Promise<IdempotencyRecordView | null> {
    const reply = (await this.script('find', VIEW, key, [])) as Buffer[] | null;
    if (!reply) return null;
    const fields = new Map<string, Buffer>();
    for (let i = 0; i + 1 < reply.length; i += 2) fields.set(text(reply[i]), reply[i + 1]);
    const get = (name: string) => {
      const value = fields.get(name);
      return value === undefined ? undefined : text(value);
    };
    const now = Number(get('now'));
    const state = get('st') as RecordState;
    const leaseAt = get('le');
    const completed = get('d');
    const created = Number(get('c'));
    const view: IdempotencyRecordView = {
      scope: get('s')!,
      key: get('k')!,
      state,
      leaseExpiresAt: leaseAt === undefined ? null : dateOf(leaseAt),
      leaseExpired: state === 'IN_PROGRESS' && leaseAt !== undefined && Number(leaseAt) <= now,
      expiresAt: dateOf(get('e')!),
      createdAt: new Date(Math.floor(created)),
      completedAt: completed === undefined ? null : dateOf(completed),
      fingerprint: get('f') ?? null,
    };
    if (state === 'COMPLETE') view.payload = fields.get('p') ?? Buffer.alloc(0);
    if (state === 'IN_PROGRESS' && fields.has('sa') && leaseAt !== undefined) {
      view.suspendedUntil = dateOf(leaseAt);
    }
    if (state === 'AMBIGUOUS') {
      view.ambiguousSince = dateOf(get('as')!);
      view.ambiguousReason = get('ar') as AmbiguityReason;
    }
    const resolvedBy = get('rb');
    if (resolvedBy !== undefined) {
      view.resolvedBy = resolvedBy;
      view.resolvedAt = dateOf(get('ra')!);
    }
    createdMicros.set(view, created);
    return view;
  }

  /** The publish command, channel and message a complete or release sends when someone waits. */
  private wakeArgs(names: RecordNames): string[] {
    return this.publish === 'SPUBLISH'
      ? ['SPUBLISH', names.channel, names.id]
      : ['PUBLISH', this.keys.wakeChannel, names.id];
  }

  /** EVALSHA; on NOSCRIPT, EVAL once (which caches the script on that server again). */
  private script(
    operation: string,
    script: RedisScript,
    key: string,
    args: Array<string | Buffer>,
  ): Promise<unknown> {
    return this.commands
      .send(operation, key, ['EVALSHA', script.sha, '1', key, ...args])
      .catch((error: unknown) => {
        if (!isNoScript(error)) throw error;
        return this.commands.send(operation, key, ['EVAL', script.source, '1', key, ...args]);
      });
  }

  private async awaitReplicas(operation: string, lease: ReplicatedRecord): Promise<void> {
    if (!this.replicas) return;
    const { replicas, timeoutMs } = this.replicas;
    try {
      const acknowledged = Number(
        await this.commands.send(
          `${operation} (WAIT)`,
          lease.names.key,
          ['WAIT', String(replicas), String(timeoutMs)],
          { timeoutMs: timeoutMs + this.timeoutMs },
        ),
      );
      if (acknowledged < replicas) {
        this.logger.warn(
          `${operation} of ${storedKeyDigest(lease.scope, lease.key)}: ${acknowledged} of ${replicas} replicas acknowledged within ${timeoutMs} ms; a failover now could lose it`,
        );
      }
    } catch (error) {
      // The write itself succeeded: report, do not fail the call (a retry would be refused).
      this.logger.warn(
        `${operation} of ${storedKeyDigest(lease.scope, lease.key)}: WAIT for ${replicas} replicas failed: ${(error as Error).message}`,
      );
    }
  }

  private async prepare(): Promise<void> {
    this.checkClient();
    const minimum = this.cluster ? MIN_CLUSTER : MIN_STANDALONE;
    for (const node of await this.commands.masters('init')) {
      const info = text((await this.commands.sendTo(node, 'init', ['INFO', 'server'])) as Buffer);
      const version = /redis_version:(\d+)\.(\d+)/.exec(info);
      if (
        version &&
        (Number(version[1]) < minimum[0] ||
          (Number(version[1]) === minimum[0] && Number(version[2]) < minimum[1]))
      ) {
        throw new IdempotencyStoreSchemaError(
          `RedisIdempotencyStore needs Redis ${minimum.join('.')} or later${this.cluster ? ' on a Cluster (sharded pub/sub)' : ''}; the server is ${version[1]}.${version[2]}`,
        );
      }
      for (const script of SCRIPTS) {
        await this.commands.sendTo(node, 'init', ['SCRIPT', 'LOAD', script.source]);
      }
    }
    if (this.byteProbe) await this.proveBytes();
  }

  /** A client that cannot hand back bytes (node-redis 4 or older) would corrupt every stored result. */
  private checkClient(): void {
    const problem = this.commands.port.bytesProblem();
    if (problem) throw new IdempotencyConfigError(`RedisIdempotencyStore: ${problem}`);
  }

  /**
   * Writes `PROBE_BYTES` under a key of its own (expiring by Redis's clock)
   * and reads them back through the same client and command options as every
   * payload, then deletes the key: a client or proxy that does not keep bytes
   * as they are fails the start, not every replay later.
   */
  private async proveBytes(): Promise<void> {
    const key = `${this.keys.prefix}probe:{${randomUUID()}}`;
    let failed = true;
    try {
      await this.commands.send('init', key, ['SET', key, PROBE_BYTES, 'PX', String(PROBE_TTL_MS)]);
      const mismatch = probeMismatch(await this.commands.send('init', key, ['GET', key]));
      if (mismatch) {
        const found = this.commands.port.describe();
        throw new IdempotencyConfigError(
          `RedisIdempotencyStore: stored bytes do not come back unchanged through this Redis client${found ? ` (${found})` : ''}: ${mismatch}; supported: ${SUPPORTED_NODE_REDIS} or ioredis 5`,
        );
      }
      failed = false;
    } finally {
      await this.commands.send('init', key, ['DEL', key]).catch((error: unknown) => {
        if (!failed) throw error;
      });
    }
  }
}

function defaultLogger(): IdempotencyLogger {
  return {
    warn: (m) => console.warn(`[nest-idempotency] ${m}`),
    error: (m) => console.error(`[nest-idempotency] ${m}`),
  };
}

/** The creation time in microseconds, for ordering records created in the same millisecond. */
const createdMicros = new WeakMap<IdempotencyRecordView, number>();
const createdOf = (view: IdempotencyRecordView) =>
  createdMicros.get(view) ?? view.createdAt.getTime();

function keepNewest<T extends { created: number }>(items: T[], limit: number): T[] {
  return items.sort((a, b) => b.created - a.created).slice(0, limit);
}

const text = (value: Buffer | string | null | undefined): string =>
  value === null || value === undefined
    ? ''
    : typeof value === 'string'
      ? value
      : value.toString('utf8');

const isPresent = (value: Buffer | null | undefined): value is Buffer =>
  value !== null && value !== undefined;

/** A stored time (epoch ms with microseconds) as a Date (whole milliseconds). */
const dateOf = (stored: string): Date => new Date(Math.floor(Number(stored)));

function positive(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new IdempotencyConfigError(
      `RedisIdempotencyStore: ${name} must be a positive number, got ${value}`,
    );
  }
  return value;
}

/** A step's field: "0" begun (null), or "1" and the value's bytes. */
function stepValue(field: Buffer | string): StoredPayload | null {
  const bytes = typeof field === 'string' ? Buffer.from(field, 'utf8') : field;
  return bytes[0] === 0x31 ? Buffer.from(bytes.subarray(1)) : null;
}

function stepLeaseLost(operation: string): IdempotencyLeaseLostError {
  return new IdempotencyLeaseLostError(
    `${operation} refused: the record is no longer held under this lease`,
  );
}
