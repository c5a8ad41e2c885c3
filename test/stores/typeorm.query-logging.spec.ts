import { randomUUID } from 'node:crypto';
import type { DataSource, Logger } from 'typeorm';
import { encodeValue, keyDigest, storedScope } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { dropSchema, openDataSource, scratchSchema } from '../support/postgres';

/**
 * An application that logs its queries (TypeORM's `logging: true`, or a logger
 * of its own) must not get idempotency keys or stored results in its logs:
 * the store shows its DataSource's logger the statements with the key
 * replaced by its digest (`scope/#<12 hex>`) and payloads by their size.
 */

/** Everything a DataSource's logger is handed, in order, as text. */
class RecordingLogger implements Logger {
  readonly entries: Array<{ method: string; query?: string; parameters: unknown[] }> = [];
  logQuery(query: string, parameters?: unknown[]): void {
    this.entries.push({ method: 'logQuery', query, parameters: parameters ?? [] });
  }
  logQueryError(error: string | Error, query: string, parameters?: unknown[]): void {
    this.entries.push({
      method: 'logQueryError',
      query: `${String(error)}\n${query}`,
      parameters: parameters ?? [],
    });
  }
  logQuerySlow(time: number, query: string, parameters?: unknown[]): void {
    this.entries.push({ method: 'logQuerySlow', query, parameters: parameters ?? [] });
  }
  logSchemaBuild(message: string): void {
    this.entries.push({ method: 'logSchemaBuild', query: message, parameters: [] });
  }
  logMigration(message: string): void {
    this.entries.push({ method: 'logMigration', query: message, parameters: [] });
  }
  log(level: string, message: unknown): void {
    this.entries.push({ method: `log(${level})`, query: String(message), parameters: [] });
  }
}

/** Every way a parameter could show its content once printed: as text, as JSON, as a buffer's bytes. */
function renderings(value: unknown): string[] {
  if (Buffer.isBuffer(value)) {
    return [value.toString('utf8'), value.toString('hex'), value.toString('base64')];
  }
  if (value instanceof Uint8Array) return renderings(Buffer.from(value));
  if (typeof value === 'object' && value !== null) return [String(value), JSON.stringify(value)];
  return [String(value)];
}

describe('TypeOrmIdempotencyStore and query logging', () => {
  const schema = scratchSchema('logging');
  const logger = new RecordingLogger();
  let dataSource: DataSource;
  let store: TypeOrmIdempotencyStore;

  beforeAll(async () => {
    dataSource = await openDataSource({ logger, logging: true });
    store = new TypeOrmIdempotencyStore(dataSource, {
      schema,
      ensureSchema: true,
      logger: { warn: () => undefined, error: () => undefined },
    });
    await store.init();
  });

  afterAll(async () => {
    await store?.close();
    if (dataSource?.isInitialized) {
      await dropSchema(dataSource, schema);
      await dataSource.destroy();
    }
  });

  it('never hands the logger a raw key or a stored payload; the key digest appears instead', async () => {
    const scope = 'PaymentsController.create';
    // Distinctive enough that any appearance is the key's or the payload's own.
    const key = `raw-key-${randomUUID()}`;
    const released = `raw-key-${randomUUID()}`;
    const secret = `card-token-${randomUUID()}`;
    const payload = encodeValue({ charge: secret });
    const payloadText = payload.toString('utf8');
    const request = (k: string, waitTimeoutMs = 0) => ({
      scope,
      key: k,
      leaseMs: 30_000,
      waitTimeoutMs,
      ttlMs: 60_000,
      fingerprint: null,
    });
    logger.entries.length = 0;

    // acquire, extend, a waiting look (the watch path), complete, a replay, find, list, release, purge
    const acquired = await store.tryAcquire(request(key));
    if (acquired.kind !== 'acquired') throw new Error(`expected to acquire, got ${acquired.kind}`);
    await expect(store.extend(acquired.lease)).resolves.toBe(true);
    await expect(store.tryAcquire(request(key, 50))).resolves.toMatchObject({ kind: 'in-flight' });
    await store.complete(acquired.lease, payload);
    const replay = await store.tryAcquire(request(key));
    expect(replay.kind === 'duplicate' && replay.payload.equals(payload)).toBe(true);
    const view = await store.find({ scope, key });
    expect(view?.payload?.equals(payload)).toBe(true);
    const listed = await store.list({ scope });
    expect(listed.some((r) => r.payload?.equals(payload))).toBe(true);
    const other = await store.tryAcquire(request(released));
    if (other.kind !== 'acquired') throw new Error(`expected to acquire, got ${other.kind}`);
    await store.release(other.lease);
    await store.purgeExpired();

    // Each statement of each call reached the logger...
    const statements = logger.entries.filter((e) => e.method === 'logQuery');
    const texts = statements.map((e) => e.query ?? '');
    const count = (pattern: RegExp) => texts.filter((q) => pattern.test(q)).length;
    // Three fresh keys inserted; the watching look and the replay found the record.
    expect(count(/INSERT INTO .* ON CONFLICT/s)).toBeGreaterThanOrEqual(3);
    expect(count(/AS lease_left_ms/)).toBeGreaterThanOrEqual(2); // the peek
    expect(count(/SET watched = true/)).toBe(1);
    expect(count(/SET state = 'COMPLETE'/)).toBe(1);
    expect(count(/pg_notify/)).toBe(1); // the waiter had marked the record watched
    expect(count(/^\s*DELETE FROM .* RETURNING watched$/s)).toBe(1);
    expect(count(/SET lease_expires_at/)).toBe(1);
    expect(count(/WITH victims AS/)).toBe(1);
    expect(texts.filter((q) => q.includes('WHERE id = $1') && q.startsWith('SELECT'))).toHaveLength(
      1,
    );
    expect(count(/ORDER BY created_at DESC/)).toBe(1);

    // ...with neither key nor payload in any text or parameter. Only positions are
    // reported, so a failure never prints what it found.
    const leaks: string[] = [];
    logger.entries.forEach((entry, i) => {
      const where = `${entry.method} #${i}`;
      const shown = [
        { what: 'text', values: [entry.query ?? ''] },
        ...entry.parameters.map((p, j) => ({ what: `parameter ${j}`, values: renderings(p) })),
      ];
      for (const { what, values } of shown) {
        for (const [label, needle] of [
          ['the raw key', key],
          ['the released raw key', released],
          ['the payload', payloadText],
          ['the payload content', secret],
        ] as const) {
          if (values.some((v) => v.includes(needle))) leaks.push(`${where} ${what} shows ${label}`);
        }
      }
    });
    expect(leaks).toEqual([]);

    // The digest names the record instead, for the acquisitions of both keys.
    const parameters = statements.flatMap((e) => e.parameters);
    expect(parameters).toContain(keyDigest(scope, key));
    expect(parameters).toContain(keyDigest(scope, released));
    expect(keyDigest(scope, key)).toMatch(/^PaymentsController\.create\/#[0-9a-f]{12}$/);
    // Payloads appear as their size.
    expect(parameters).toContain(`<${payload.length} bytes>`);
  });

  it("never hands the logger a tenant: a tenant's stored scope is shown without it", async () => {
    const tenant = `tenant-${randomUUID()}`;
    const scope = storedScope('PaymentsController.create', tenant);
    const key = `raw-key-${randomUUID()}`;
    const request = (waitTimeoutMs = 0) => ({
      scope,
      key,
      leaseMs: 30_000,
      waitTimeoutMs,
      ttlMs: 60_000,
      fingerprint: null,
    });
    logger.entries.length = 0;

    const acquired = await store.tryAcquire(request());
    if (acquired.kind !== 'acquired') throw new Error(`expected to acquire, got ${acquired.kind}`);
    await expect(store.tryAcquire(request(50))).resolves.toMatchObject({ kind: 'in-flight' });
    await store.complete(acquired.lease, encodeValue('v'));
    await expect(store.tryAcquire(request())).resolves.toMatchObject({ kind: 'duplicate' });
    await expect(store.list({ scope })).resolves.toHaveLength(1);
    await expect(store.find({ scope, key })).resolves.toMatchObject({ scope });

    const statements = logger.entries.filter((e) => e.method === 'logQuery');
    expect(statements.length).toBeGreaterThanOrEqual(6);
    const leaks: string[] = [];
    logger.entries.forEach((entry, i) => {
      const shown = [entry.query ?? '', ...entry.parameters.flatMap((p) => renderings(p))];
      if (shown.some((v) => v.includes(tenant))) leaks.push(`${entry.method} #${i}`);
      if (shown.some((v) => v.includes(key))) leaks.push(`${entry.method} #${i} (the key)`);
    });
    expect(leaks).toEqual([]);
    const parameters = statements.flatMap((e) => e.parameters);
    // The record is named by its digest (which covers the tenant), its scope without the tenant.
    expect(parameters).toContain(keyDigest('PaymentsController.create', key, tenant));
    expect(parameters).toContain('PaymentsController.create#tenant:<redacted>');
  });
});
