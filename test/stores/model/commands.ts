import { inspect, isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import {
  DEFAULT_PURGE_BATCH,
  encodeValue,
  IdempotencyLeaseLostError,
  Lease,
  RecordId,
} from 'nest-idempotency';
import {
  AcquireOutcome,
  Expected,
  ResolveOutcome,
  Fingerprint,
  HeldOutcome,
  Key,
  KEYS,
  LeaseNo,
  LifecycleModel,
  NEVER_ISSUED,
} from './lifecycle-model';
import { LEASE_MS, snapshotOf, StoreUnderTest, TTL_MS } from './stores-under-test';

/** A well-formed lease id (the PostgreSQL column is a uuid) that no acquisition returns. */
const NEVER_ISSUED_ID = '00000000-0000-4000-8000-000000000000';

/** One store within one run: its fresh scope and the leases it returned (with their key), by model lease number. */
export interface StoreSession {
  readonly sut: StoreUnderTest;
  readonly scope: string;
  readonly leases: Array<{ key: Key; lease: Lease }>;
}

/**
 * The system under test of one run: every store, driven in lockstep with the
 * model. After each command it compares each store's outcome with the model's,
 * then every key's `find()` with the model's snapshot, and fails with the whole
 * run so far.
 */
export class ModelRun {
  private readonly log: string[] = [];

  constructor(
    private readonly sessions: StoreSession[],
    /** Labels of the lifecycle edges exercised, counted over every run (see the spec). */
    private readonly coverage: Map<string, number>,
  ) {}

  async step(command: LifecycleCommand, model: LifecycleModel): Promise<void> {
    const lease = command.lease(model);
    const expected = command.onModel(model, lease);
    for (const label of expected.labels) {
      this.coverage.set(label, (this.coverage.get(label) ?? 0) + 1);
    }
    // An unexpected error is an answer like any other: reported with the run so far.
    const actual = await Promise.all(
      this.sessions.map((session) =>
        command
          .onStore(session, lease)
          .catch((error: Error) => ({ threw: `${error.name}: ${error.message}` })),
      ),
    );
    const leaseNote =
      lease === undefined ? '' : lease === NEVER_ISSUED ? ' [never issued]' : ` [lease #${lease}]`;
    this.log.push(`${this.log.length + 1}. ${command}${leaseNote} → ${show(expected.outcome)}`);
    this.sessions.forEach((session, i) => {
      if (!isDeepStrictEqual(actual[i], expected.outcome)) {
        this.fail(`${session.sut.name} answered ${show(actual[i])}`);
      }
    });
    for (const key of KEYS) {
      const want = model.snapshot(key);
      for (const session of this.sessions) {
        const id: RecordId = { scope: session.scope, key };
        const got = snapshotOf(await session.sut.store.find(id), id);
        if (!isDeepStrictEqual(got, want)) {
          this.fail(`then ${session.sut.name} find(${key}) = ${show(got)}; model: ${show(want)}`);
        }
      }
    }
  }

  private fail(what: string): never {
    throw new Error(
      `a store disagrees with the lifecycle model at step ${this.log.length}: ${what}\n` +
        `Steps of this run (→ what the model expects; [lease #n] = the n-th lease issued):\n  ` +
        this.log.join('\n  '),
    );
  }
}

/**
 * The lease handle a command on `key` presents: the one the store issued when
 * it was issued for `key`; otherwise (another key's lease id, or one never
 * issued) a handle for `key` carrying that lease id, as the store would build it.
 */
function presentedLease(session: StoreSession, key: Key, lease: LeaseNo): Lease {
  const id = { scope: session.scope, key };
  if (lease === NEVER_ISSUED) return session.sut.leaseFor(id, NEVER_ISSUED_ID);
  const issued = session.leases[lease];
  return issued.key === key ? issued.lease : session.sut.leaseFor(id, issued.lease.leaseId);
}

/** Stored bytes are shown as their text (`bytes('v{"a":1}')`), so a counterexample reads as values. */
function show(value: unknown): string {
  return inspect(readable(value), { depth: null, breakLength: Infinity });
}

function readable(value: unknown): unknown {
  if (Buffer.isBuffer(value))
    return { [inspect.custom]: () => `bytes(${inspect(value.toString('utf8'))})` };
  if (Array.isArray(value)) return value.map(readable);
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, readable(v)]));
  }
  return value;
}

/** Which lease id a complete/release/extend presents. */
export type LeaseRef =
  | { kind: 'current' } // the key's holder, else its last (stale) lease, else the newest of any key
  | { kind: 'previous' } // the key's lease before that one (a stale owner after a steal), else as current
  | { kind: 'issued'; n: number } // any lease of this run, any key: n modulo the number issued
  | { kind: 'never' }; // a lease id no acquisition returned

/** Falls back as the comments above say, so few commands are wasted on a key that never had a lease. */
function resolve(ref: LeaseRef, model: LifecycleModel, key: Key): LeaseNo {
  if (ref.kind === 'never' || model.leasesIssued === 0) return NEVER_ISSUED;
  if (ref.kind === 'issued') return ref.n % model.leasesIssued;
  const previous = ref.kind === 'previous' ? model.previousLease(key) : NEVER_ISSUED;
  if (previous !== NEVER_ISSUED) return previous;
  const current = model.currentOrLastLease(key);
  return current !== NEVER_ISSUED ? current : model.leasesIssued - 1;
}

function describeRef(ref: LeaseRef): string {
  return ref.kind === 'issued' ? `issued lease ${ref.n}` : `${ref.kind} lease`;
}

abstract class LifecycleCommand implements fc.AsyncCommand<LifecycleModel, ModelRun> {
  check(): boolean {
    return true; // every command is legal in every state; the model says what it must do
  }

  run(model: LifecycleModel, real: ModelRun): Promise<void> {
    return real.step(this, model);
  }

  /** The lease this command presents, resolved against the model before it changes. */
  lease(_model: LifecycleModel): LeaseNo | undefined {
    return undefined;
  }

  abstract onModel(model: LifecycleModel, lease: LeaseNo | undefined): Expected<unknown>;
  abstract onStore(session: StoreSession, lease: LeaseNo | undefined): Promise<unknown>;
  abstract toString(): string;
}

class Acquire extends LifecycleCommand {
  constructor(
    readonly key: Key,
    readonly fingerprint: Fingerprint | undefined,
    /** `onExpiredLease: 'refuse'` (strict mode). */
    readonly strict = false,
  ) {
    super();
  }

  onModel(model: LifecycleModel): Expected<AcquireOutcome> {
    return model.acquire(this.key, this.fingerprint, this.strict);
  }

  async onStore(session: StoreSession): Promise<AcquireOutcome | { unexpected: unknown }> {
    const result = await session.sut.store.tryAcquire({
      scope: session.scope,
      key: this.key,
      leaseMs: LEASE_MS,
      ttlMs: TTL_MS,
      waitTimeoutMs: 0,
      fingerprint: this.fingerprint ?? null,
      ...(this.strict ? { onExpiredLease: 'refuse' as const } : {}),
    });
    switch (result.kind) {
      case 'ambiguous':
        if (!(result.since instanceof Date)) return { unexpected: result };
        return {
          kind: 'ambiguous',
          reason: result.reason,
          transitioned: result.transitioned === true,
        };
      case 'acquired':
        session.leases.push({ key: this.key, lease: result.lease });
        return { kind: 'acquired' };
      case 'duplicate':
        if (!(result.completedAt instanceof Date)) return { unexpected: result };
        return { kind: 'duplicate', payload: result.payload };
      case 'in-flight':
        if (!(result.retryAfterMs > 0 && result.retryAfterMs <= LEASE_MS)) {
          return { unexpected: result };
        }
        return { kind: 'in-flight', retryAfterWithinLease: true };
      case 'suspended':
        // The model never suspends a record.
        return { unexpected: result };
      default:
        return result;
    }
  }

  toString(): string {
    return `acquire(${this.key}${this.fingerprint ? `, ${this.fingerprint}` : ''}${this.strict ? ', strict' : ''})`;
  }
}

/** complete/release: done, or refused with IdempotencyLeaseLostError; anything else fails the run. */
async function held(operation: Promise<void>): Promise<HeldOutcome> {
  try {
    await operation;
    return 'done';
  } catch (error) {
    if (error instanceof IdempotencyLeaseLostError) return 'lease-lost';
    throw error;
  }
}

abstract class WithLease extends LifecycleCommand {
  constructor(
    readonly key: Key,
    readonly ref: LeaseRef,
  ) {
    super();
  }

  override lease(model: LifecycleModel): LeaseNo {
    return resolve(this.ref, model, this.key);
  }

  protected presented(session: StoreSession, lease: LeaseNo): Lease {
    return presentedLease(session, this.key, lease);
  }
}

class Complete extends WithLease {
  constructor(
    key: Key,
    ref: LeaseRef,
    readonly payload: unknown,
  ) {
    super(key, ref);
  }

  /** The model keeps the bytes the caller stores: replays and views must hand back exactly these. */
  onModel(model: LifecycleModel, lease: LeaseNo): Expected<HeldOutcome> {
    return model.complete(this.key, lease, encodeValue(this.payload));
  }

  onStore(session: StoreSession, lease: LeaseNo): Promise<HeldOutcome> {
    return held(
      session.sut.store.complete(this.presented(session, lease), encodeValue(this.payload)),
    );
  }

  toString(): string {
    return `complete(${this.key}, ${describeRef(this.ref)}, ${fc.stringify(this.payload)})`;
  }
}

/** Thrown inside the transaction to roll it back after `completeIn` answered. */
class Rollback extends Error {}

/**
 * Transactional completion: `completeIn` in a transaction of the store's own,
 * which then commits, or throws after the completion so that it rolls back
 * (a handler whose later write failed, or whose commit did).
 */
class CompleteInTransaction extends WithLease {
  constructor(
    key: Key,
    ref: LeaseRef,
    readonly payload: unknown,
    readonly commit: boolean,
  ) {
    super(key, ref);
  }

  onModel(model: LifecycleModel, lease: LeaseNo): Expected<HeldOutcome | 'rolled-back'> {
    return model.completeInTransaction(this.key, lease, encodeValue(this.payload), this.commit);
  }

  async onStore(session: StoreSession, lease: LeaseNo): Promise<HeldOutcome | 'rolled-back'> {
    const transactional = session.sut.store.transactional;
    if (!transactional) throw new Error(`${session.sut.name} has no transactional completion`);
    const presented = this.presented(session, lease);
    try {
      const stored = await transactional.transaction(async (tx) => {
        const result = await transactional.completeIn(tx, presented, encodeValue(this.payload));
        if (result === 'lease-lost') return result;
        if (!this.commit) throw new Rollback();
        return result;
      });
      if (stored === 'lease-lost') return 'lease-lost';
      await transactional.afterCommit?.(presented);
      return 'done';
    } catch (error) {
      if (error instanceof Rollback) return 'rolled-back';
      throw error;
    }
  }

  toString(): string {
    return `completeIn(${this.key}, ${describeRef(this.ref)}, ${fc.stringify(this.payload)}) then ${this.commit ? 'commit' : 'rollback'}`;
  }
}

class Release extends WithLease {
  onModel(model: LifecycleModel, lease: LeaseNo): Expected<HeldOutcome> {
    return model.release(this.key, lease);
  }

  onStore(session: StoreSession, lease: LeaseNo): Promise<HeldOutcome> {
    return held(session.sut.store.release(this.presented(session, lease)));
  }

  toString(): string {
    return `release(${this.key}, ${describeRef(this.ref)})`;
  }
}

/** Strict mode: the holder's action threw, so its record becomes AMBIGUOUS. */
class MarkAmbiguous extends WithLease {
  onModel(model: LifecycleModel, lease: LeaseNo): Expected<HeldOutcome> {
    return model.markAmbiguous(this.key, lease);
  }

  onStore(session: StoreSession, lease: LeaseNo): Promise<HeldOutcome> {
    return held(
      session.sut.store.strictMode!.markAmbiguous(this.presented(session, lease), 'action-failed'),
    );
  }

  toString(): string {
    return `markAmbiguous(${this.key}, ${describeRef(this.ref)})`;
  }
}

/** Strict mode: an operator (or a reconcile hook) says what happened; `payload` undefined: not executed. */
class Resolve extends LifecycleCommand {
  constructor(
    readonly key: Key,
    readonly payload: unknown,
    readonly completed: boolean,
  ) {
    super();
  }

  private bytes() {
    return this.completed ? encodeValue(this.payload) : undefined;
  }

  onModel(model: LifecycleModel): Expected<ResolveOutcome> {
    return model.resolve(this.key, this.bytes(), 'cli:local');
  }

  async onStore(session: StoreSession): Promise<ResolveOutcome | { unexpected: unknown }> {
    const bytes = this.bytes();
    const result = await session.sut.store.strictMode!.resolve(
      { scope: session.scope, key: this.key },
      bytes === undefined
        ? { outcome: 'not-executed', resolvedBy: 'cli:local' }
        : { outcome: 'completed', payload: bytes, ttlMs: TTL_MS, resolvedBy: 'cli:local' },
    );
    if (result.kind === 'resolved') {
      return result.resolvedAt instanceof Date ? { kind: 'resolved' } : { unexpected: result };
    }
    return result as ResolveOutcome;
  }

  toString(): string {
    return this.completed
      ? `resolve(${this.key}, completed, ${fc.stringify(this.payload)})`
      : `resolve(${this.key}, not-executed)`;
  }
}

class Extend extends WithLease {
  onModel(model: LifecycleModel, lease: LeaseNo): Expected<boolean> {
    return model.extend(this.key, lease);
  }

  /** Every lease is issued (or built) for LEASE_MS, so this extends by LEASE_MS. */
  onStore(session: StoreSession, lease: LeaseNo): Promise<boolean> {
    return session.sut.store.extend(this.presented(session, lease));
  }

  toString(): string {
    return `extend(${this.key}, ${describeRef(this.ref)})`;
  }
}

class ExpireLease extends LifecycleCommand {
  constructor(readonly key: Key) {
    super();
  }

  onModel(model: LifecycleModel): Expected<number> {
    return model.expireLease(this.key);
  }

  onStore(session: StoreSession): Promise<number> {
    return session.sut.expireLease({ scope: session.scope, key: this.key });
  }

  toString(): string {
    return `expireLease(${this.key})`;
  }
}

class ExpireTtl extends LifecycleCommand {
  constructor(readonly key: Key) {
    super();
  }

  onModel(model: LifecycleModel): Expected<number> {
    return model.expireTtl(this.key);
  }

  onStore(session: StoreSession): Promise<number> {
    return session.sut.expireTtl({ scope: session.scope, key: this.key });
  }

  toString(): string {
    return `expireTtl(${this.key})`;
  }
}

/**
 * `purgeExpired()` with its default batch, repeated until a batch comes back
 * short, as a caller that wants everything due gone does. It purges the whole
 * table, so the spec empties its scratch schema before each run: the count is
 * then this run's alone. (With a small limit, *which* records go first is
 * store-specific, so the model could only predict the count, not the states
 * that follow.)
 */
class Purge extends LifecycleCommand {
  onModel(model: LifecycleModel): Expected<number> {
    return model.purge();
  }

  async onStore(session: StoreSession): Promise<number> {
    let purged = 0;
    for (;;) {
      const batch = await session.sut.store.purgeExpired();
      purged += batch;
      if (batch < DEFAULT_PURGE_BATCH) return purged;
    }
  }

  toString(): string {
    return 'purge()';
  }
}

const key = fc.constantFrom(...KEYS);
const fingerprint = fc.constantFrom<Fingerprint | undefined>(undefined, 'f1', 'f2');
const leaseRef: fc.Arbitrary<LeaseRef> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ kind: 'current' as const }) },
  { weight: 3, arbitrary: fc.constant({ kind: 'previous' as const }) },
  { weight: 2, arbitrary: fc.nat({ max: 50 }).map((n) => ({ kind: 'issued' as const, n })) },
  { weight: 1, arbitrary: fc.constant({ kind: 'never' as const }) },
);
/** Small JSON-safe results, including `undefined` (a handler that returns nothing) and `null`. */
const payload = fc.oneof(
  fc.constant(undefined),
  fc.constant(null),
  fc.integer({ min: -1000, max: 1000 }),
  fc.string({ maxLength: 6 }),
  fc.record(
    {
      status: fc.constantFrom(200, 201, 409),
      body: fc.array(fc.string({ maxLength: 4 }), { maxLength: 3 }),
    },
    { noNullPrototype: true }, // a replay is plain JSON; compare like with like
  ),
);

const acquire = fc.tuple(key, fingerprint).map(([k, f]) => new Acquire(k, f));
const complete = fc.tuple(key, leaseRef, payload).map(([k, r, p]) => new Complete(k, r, p));
const expireLease = key.map((k) => new ExpireLease(k));
const expireTtl = key.map((k) => new ExpireTtl(k));
const purge = fc.constant(new Purge());

/**
 * Random interleavings of up to `maxCommands` commands (any length up to it,
 * not fast-check's small default), shrunk by its command shrinker. A command's
 * arbitrary appears once per unit of weight: acquisitions keep the two keys
 * busy, and expiries and purges come often enough that the deep edges (a steal,
 * a stale owner fenced out, purge sparing a live lease) turn up in most suites.
 */
export function lifecycleCommands(
  maxCommands: number,
  /** Add strict mode: strict acquisitions, markAmbiguous and resolve (stores that declare `strictMode`). */
  strict = false,
  /** Add transactional completion, committed or rolled back (stores that declare `transactional`). */
  transactional = false,
): fc.Arbitrary<Iterable<fc.AsyncCommand<LifecycleModel, ModelRun>>> {
  const inTransaction = fc
    .tuple(key, leaseRef, payload, fc.boolean())
    .map(([k, r, p, c]) => new CompleteInTransaction(k, r, p, c));
  const transactionalCommands = transactional ? [inTransaction, inTransaction] : [];
  const strictCommands = strict
    ? [
        fc.tuple(key, fingerprint).map(([k, f]) => new Acquire(k, f, true)),
        fc.tuple(key, fingerprint).map(([k, f]) => new Acquire(k, f, true)),
        fc.tuple(key, leaseRef).map(([k, r]) => new MarkAmbiguous(k, r)),
        // Twice: a resolution needs an AMBIGUOUS record at that step, and both outcomes are required edges.
        fc.tuple(key, payload, fc.boolean()).map(([k, p, c]) => new Resolve(k, p, c)),
        fc.tuple(key, payload, fc.boolean()).map(([k, p, c]) => new Resolve(k, p, c)),
      ]
    : [];
  return fc.commands<LifecycleModel, ModelRun, false>(
    [
      ...strictCommands,
      ...transactionalCommands,
      acquire,
      acquire,
      acquire,
      complete,
      complete,
      fc.tuple(key, leaseRef).map(([k, r]) => new Release(k, r)),
      fc.tuple(key, leaseRef).map(([k, r]) => new Extend(k, r)),
      expireLease,
      expireLease,
      expireTtl,
      expireTtl,
      purge,
      purge,
    ],
    { maxCommands, size: 'max' },
  );
}
