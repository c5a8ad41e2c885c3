import { randomUUID } from 'node:crypto';
import { Client, Notification } from 'pg';
import type { DataSource } from 'typeorm';
import {
  AcquireRequest,
  AcquireResult,
  encodeValue,
  IdempotencyStore,
  Lease,
} from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { channelFor, recordIdOf } from '../../libs/idempotency/src/stores/sql/table';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from '../support/postgres';
import { quiet, settlesWithin } from '../support/store-assertions';

/**
 * A notifying commit takes a database-wide lock, so the PostgreSQL store
 * notifies only for a record someone waits on: the first waiter marks it
 * `watched` in its look, and complete and release call pg_notify only then.
 *
 * A separate connection LISTENs on the store's channel. That nothing was sent
 * is shown without sleeping: after the operation commits, the test sends a
 * marker notification of its own on the channel; PostgreSQL delivers
 * notifications in commit order, so whatever the operation sent arrives first.
 */

const TABLE = 'idempotency_records';

/** Records notifications on one channel and reports those that came before a marker. */
class ChannelSpy {
  private readonly received: Notification[] = [];
  private readonly arrived = new Set<() => void>();

  private constructor(
    private readonly client: Client,
    readonly channel: string,
  ) {
    client.on('notification', (message) => {
      this.received.push(message);
      for (const wake of this.arrived) wake();
    });
  }

  static async listen(channel: string): Promise<ChannelSpy> {
    const client = new Client({ connectionString: testDatabaseUrl() });
    await client.connect();
    await client.query(`LISTEN "${channel}"`);
    return new ChannelSpy(client, channel);
  }

  /**
   * Every notification on the channel since the previous call, up to a marker
   * sent now through `sender` (after whatever the test did has committed).
   */
  async sinceLastCall(sender: DataSource): Promise<string[]> {
    const marker = `marker-${randomUUID()}`;
    const seen = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the marker notification never came')), 5000);
      const check = () => {
        if (!this.received.some((n) => n.payload === marker)) return;
        clearTimeout(timer);
        this.arrived.delete(check);
        resolve();
      };
      this.arrived.add(check);
      check();
    });
    await sender.query('SELECT pg_notify($1, $2)', [this.channel, marker]);
    await seen;
    const upTo = this.received.findIndex((n) => n.payload === marker);
    const before = this.received.splice(0, upTo + 1).slice(0, -1);
    for (const n of before) expect(n.channel).toBe(this.channel);
    return before.map((n) => n.payload ?? '');
  }

  close(): Promise<void> {
    return this.client.end();
  }
}

/** Resolves when `count` duplicates have started waiting in `store` (IdempotencyStore.onWait) on `scope`. */
function waitersWaiting(store: IdempotencyStore, scope: string, count: number): Promise<void> {
  return new Promise((resolve) => {
    let seen = 0;
    const stop = store.onWait!((waiting) => {
      if (waiting !== scope || ++seen < count) return;
      stop();
      resolve();
    });
  });
}

describe('TypeOrmIdempotencyStore notifies only when someone waits', () => {
  const schema = scratchSchema('notify');
  let admin: DataSource;
  let otherDataSource: DataSource;
  /**
   * Two instances, each on a pool and LISTEN connection of its own. Both poll
   * once a minute, so a waiter answered within seconds was woken by a NOTIFY.
   */
  let holder: TypeOrmIdempotencyStore;
  let other: TypeOrmIdempotencyStore;
  let spy: ChannelSpy;

  beforeAll(async () => {
    [admin, otherDataSource] = await Promise.all([openDataSource(), openDataSource()]);
    holder = new TypeOrmIdempotencyStore(admin, {
      schema,
      ensureSchema: true,
      pollIntervalMs: 60_000,
      logger: quiet,
    });
    other = new TypeOrmIdempotencyStore(otherDataSource, {
      schema,
      pollIntervalMs: 60_000,
      logger: quiet,
    });
    await holder.init();
    await other.init();
    spy = await ChannelSpy.listen(channelFor({ schema, table: TABLE }));
  });

  afterAll(async () => {
    await spy?.close();
    await holder?.close();
    await other?.close();
    if (admin?.isInitialized) {
      await dropSchema(admin, schema);
      await admin.destroy();
    }
    if (otherDataSource?.isInitialized) await otherDataSource.destroy();
  });

  let scope: string;
  beforeEach(async () => {
    scope = `notify-${randomUUID()}`;
    expect(await spy.sinceLastCall(admin)).toEqual([]); // nothing left over from before
  });

  const request = (key: string, overrides: Partial<AcquireRequest> = {}): AcquireRequest => ({
    scope,
    key,
    leaseMs: 60_000,
    waitTimeoutMs: 0,
    ttlMs: 600_000,
    fingerprint: null,
    ...overrides,
  });

  async function acquire(store: IdempotencyStore, key: string): Promise<Lease> {
    const result = await store.tryAcquire(request(key));
    if (result.kind !== 'acquired') throw new Error(`expected to acquire, got ${result.kind}`);
    return result.lease;
  }

  /** The record's payload on the channel: its id's hex, never the key. */
  const notificationOf = (key: string) => recordIdOf(scope, key).toString('hex');

  async function watchedFlag(key: string): Promise<boolean> {
    const rows: Array<{ watched: boolean }> = await admin.query(
      `SELECT watched FROM "${schema}"."${TABLE}" WHERE id = $1`,
      [recordIdOf(scope, key)],
    );
    expect(rows).toHaveLength(1);
    return rows[0].watched;
  }

  it('sends nothing when a record nobody waited on is completed or released', async () => {
    const completed = await acquire(holder, 'completed');
    expect(await watchedFlag('completed')).toBe(false);
    await holder.complete(completed, encodeValue('done'));
    expect(await spy.sinceLastCall(admin)).toEqual([]);

    const released = await acquire(holder, 'released');
    await holder.release(released);
    expect(await spy.sinceLastCall(admin)).toEqual([]);
  });

  it('sends nothing for a duplicate that looked without waiting (waitTimeoutMs 0)', async () => {
    const lease = await acquire(holder, 'k');
    await expect(other.tryAcquire(request('k'))).resolves.toMatchObject({ kind: 'in-flight' });
    await expect(holder.tryAcquire(request('k'))).resolves.toMatchObject({ kind: 'in-flight' });
    expect(await watchedFlag('k')).toBe(false);
    await holder.complete(lease, encodeValue('done'));
    expect(await spy.sinceLastCall(admin)).toEqual([]);
  });

  it('sends exactly one notification when the holder completes a record a waiter waits on, and wakes it', async () => {
    const lease = await acquire(holder, 'k');
    const waiting = waitersWaiting(other, scope, 1);
    let settled = false;
    const waiter = other
      .tryAcquire(request('k', { waitTimeoutMs: 30_000 }))
      .finally(() => (settled = true));
    await waiting;
    expect(await watchedFlag('k')).toBe(true);
    expect(await spy.sinceLastCall(admin)).toEqual([]); // marking it sent nothing
    expect(settled).toBe(false);

    const payload = encodeValue({ for: 'the waiter' });
    await holder.complete(lease, payload);

    // The instance polls once a minute and the wait lasts 30 s: only the NOTIFY answers it now.
    const result = await settlesWithin(waiter, 5000, 'the waiter on the other instance');
    expect(result.kind).toBe('duplicate');
    expect((result as Extract<AcquireResult, { kind: 'duplicate' }>).payload.equals(payload)).toBe(
      true,
    );
    expect(await spy.sinceLastCall(admin)).toEqual([notificationOf('k')]);
  });

  it('sends exactly one notification when the holder releases a record a waiter waits on, and hands it the key', async () => {
    const lease = await acquire(holder, 'k');
    const waiting = waitersWaiting(other, scope, 1);
    const waiter = other.tryAcquire(request('k', { waitTimeoutMs: 30_000 }));
    await waiting;

    await holder.release(lease);

    const result = await settlesWithin(waiter, 5000, 'the waiter on the other instance');
    if (result.kind !== 'acquired') throw new Error(`the waiter got ${result.kind}`);
    expect(await spy.sinceLastCall(admin)).toEqual([notificationOf('k')]);
    // The waiter's new record starts unwatched: completing it sends nothing.
    expect(await watchedFlag('k')).toBe(false);
    await other.complete(result.lease, encodeValue('second holder'));
    expect(await spy.sinceLastCall(admin)).toEqual([]);
  });

  it('sends one notification for several waiters on both instances, and wakes them all', async () => {
    const lease = await acquire(holder, 'k');
    const onOther = waitersWaiting(other, scope, 3);
    const onHolder = waitersWaiting(holder, scope, 2);
    const waiters = [
      ...Array.from({ length: 3 }, () => other.tryAcquire(request('k', { waitTimeoutMs: 30_000 }))),
      ...Array.from({ length: 2 }, () =>
        holder.tryAcquire(request('k', { waitTimeoutMs: 30_000 })),
      ),
    ];
    await Promise.all([onOther, onHolder]);
    expect(await spy.sinceLastCall(admin)).toEqual([]);

    const payload = encodeValue('for everyone');
    await holder.complete(lease, payload);

    const results = await settlesWithin(Promise.all(waiters), 5000, 'the five waiters');
    for (const result of results) {
      expect(result.kind).toBe('duplicate');
      expect(
        (result as Extract<AcquireResult, { kind: 'duplicate' }>).payload.equals(payload),
      ).toBe(true);
    }
    expect(await spy.sinceLastCall(admin)).toEqual([notificationOf('k')]);
  });
});
