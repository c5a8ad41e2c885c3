import { keyDigest, Lease } from 'nest-idempotency';
import type { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { CliRun, rowsMentioning } from './cli-harness';

/**
 * `resolve` on a TypeORM store (PostgreSQL, MySQL/MariaDB), through the CLI:
 * records made AMBIGUOUS by the store itself (a failed action through
 * markAmbiguous, and an expired lease refused in strict mode), then resolved
 * `--completed --payload` (COMPLETE, replayed, recorded as cli:local) and
 * `--not-executed` (deleted, the next attempt runs); a record in flight is
 * left alone. `on` runs the CLI against the store's table; `where` is how the
 * CLI names that table.
 */
export async function expectResolveOnSql(
  store: TypeOrmIdempotencyStore,
  on: (...args: string[]) => Promise<CliRun>,
  where: string,
  /** Moves the lease deadline of a record to before the database's clock. */
  expireLease: (scope: string, key: string) => Promise<void>,
): Promise<void> {
  const scope = 'Payments.refund';
  const [ran, notRun, open] = ['raw-key-ran-5e1a', 'raw-key-not-run-91c4', 'raw-key-open-2b7d'];
  const request = (key: string) => ({
    scope,
    key,
    leaseMs: 600_000,
    ttlMs: 3_600_000,
    waitTimeoutMs: 0,
    fingerprint: null,
    onExpiredLease: 'refuse' as const,
  });
  const acquire = async (key: string): Promise<Lease> => {
    const result = await store.tryAcquire(request(key));
    if (result.kind !== 'acquired') throw new Error(`resolve seed: ${result.kind}`);
    return result.lease;
  };
  await store.strictMode.markAmbiguous(await acquire(ran), 'action-failed');
  await acquire(notRun);
  await expireLease(scope, notRun);
  const refused = await store.tryAcquire(request(notRun));
  expect(refused).toMatchObject({ kind: 'ambiguous', reason: 'lease-expired', transitioned: true });
  await acquire(open);

  const listed = await on('list');
  expect(rowsMentioning(listed.stdout, `#${keyDigest(scope, ran).slice(-12)}`)[0]).toMatch(
    / AMBIGUOUS {4}until resolved /,
  );
  expect(listed.stdout).not.toContain(ran);
  const onlyAmbiguous = await on('list', '--state', 'ambiguous', '--json');
  expect(
    JSON.parse(onlyAmbiguous.stdout)
      .records.map((r: { key: string; ambiguousReason: string }) => [r.key, r.ambiguousReason])
      .sort(),
  ).toEqual([
    [notRun, 'lease-expired'],
    [ran, 'action-failed'],
  ]);
  const before = await on('inspect', scope, ran);
  expect(before.stdout).toMatch(
    /│ ambiguous\s+│ \S+Z \(.*\), action-failed; resolve it: nest-idempotency resolve \S+\/#[0-9a-f]{12} --completed or --not-executed/,
  );
  expect(before.stdout).toContain('payload: none (the outcome of the action is unknown)');

  const digest = keyDigest(scope, ran).replace(/[.*/#]/g, '\\$&');
  const completed = await on('resolve', scope, ran, '--completed', '--payload', '{"id":7}');
  expect(completed.stderr).toBe('');
  expect(completed.stdout).toMatch(
    new RegExp(
      `^resolved ${digest} in ${where.replace(/[.*]/g, '\\$&')} as completed by cli:local at \\S+Z: it is COMPLETE and replayed until \\S+Z\\n$`,
    ),
  );
  expect(completed.stdout).not.toContain(ran);
  expect(completed.code).toBe(0);
  const view = await store.find({ scope, key: ran });
  expect(view).toMatchObject({ state: 'COMPLETE', resolvedBy: 'cli:local' });
  expect(view?.resolvedAt).toBeInstanceOf(Date);
  expect(view?.ambiguousSince).toBeUndefined();
  const after = await on('inspect', scope, ran);
  expect(after.stdout).toMatch(/│ resolved\s+│ by cli:local at \S+Z\s+│/);
  expect(after.stdout).toContain(
    `payload (as stored, after sanitize):\n${JSON.stringify({ id: 7 }, null, 2)}`,
  );
  const replay = await store.tryAcquire(request(ran));
  expect(replay.kind).toBe('duplicate');

  const deleted = await on('resolve', scope, notRun, '--not-executed', '--json');
  expect(deleted.code).toBe(0);
  expect(JSON.parse(deleted.stdout)).toMatchObject({
    table: where,
    key: notRun,
    outcome: 'not-executed',
    resolvedBy: 'cli:local',
    expiresAt: null,
    event: { type: 'resolved', resolver: 'cli:local', outcome: 'not-executed' },
  });
  expect(await store.find({ scope, key: notRun })).toBeNull();
  // The next attempt runs.
  expect((await store.tryAcquire(request(notRun))).kind).toBe('acquired');

  // Only an AMBIGUOUS record is resolved: the one in flight is left as it is.
  const held = await on('resolve', scope, open, '--not-executed');
  expect(held.stderr).toBe(
    `error: ${keyDigest(scope, open)} in ${where} is IN_PROGRESS, not AMBIGUOUS: nothing was changed (only an AMBIGUOUS record is resolved)\n`,
  );
  expect(held.code).toBe(6);
  expect((await store.find({ scope, key: open }))?.state).toBe('IN_PROGRESS');
  const missing = await on('resolve', scope, 'raw-key-absent-0c3e', '--not-executed');
  expect(missing.code).toBe(5);
}
