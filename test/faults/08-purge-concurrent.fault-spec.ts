/**
 * Case 8: purge runs back to back on three instances (worker processes) while
 * the same instances serve traffic with short ttls: actions that outlive their
 * ttl on a renewed lease, keys re-run at a random point inside their ttl.
 * No live IN_PROGRESS record and no unexpired COMPLETE record may be deleted.
 *
 * Three independent observers:
 * - a trigger on the records table writes down every deletion with the row as
 *   it was and the server's clock at that instant;
 * - a re-run inside the ttl that executes again (instead of replaying) means
 *   its COMPLETE record was deleted early; a purged live record makes its
 *   holder's heartbeat or completion report lease-lost;
 * - seeded records that must survive (live lease, unexpired result) are
 *   counted at the end, next to seeded expired ones that must be gone.
 */
import { PROBE_SCOPE } from 'nest-idempotency/store-kit';
import { DataSource } from 'typeorm';
import { scratchSchema, testDatabaseUrl } from '../support/postgres';
import {
  Child,
  eventsOf,
  expectNoRawKeys,
  is,
  recordResult,
  setUpFaultCase,
  startChild,
  tearDownFaultCase,
} from './support/harness';
import type { PurgeTrafficStats } from './support/protocol';

const INSTANCES = 3;
const TRAFFIC_MS = 6000;
const SCOPE = 'faults.purge';
const SEEDED = 400;

describe('fault 8: purge concurrently with traffic on several instances', () => {
  const schema = scratchSchema('fault_purge');
  let admin: DataSource;
  let workers: Child[] = [];

  beforeAll(async () => {
    ({ admin } = await setUpFaultCase(schema, []));
    const t = `"${schema}".idempotency_records`;
    await admin.query(
      `CREATE TABLE "${schema}".deletions (
         scope text, state text, lease_expires_at timestamptz, expires_at timestamptz,
         at timestamptz NOT NULL, by_purge boolean NOT NULL)`,
    );
    await admin.query(
      `CREATE FUNCTION "${schema}".audit_delete() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         INSERT INTO "${schema}".deletions
         VALUES (OLD.scope, OLD.state, OLD.lease_expires_at, OLD.expires_at, clock_timestamp(),
                 current_query() LIKE '%victims%');
         RETURN OLD;
       END $$`,
    );
    await admin.query(
      `CREATE TRIGGER audit_delete BEFORE DELETE ON ${t}
       FOR EACH ROW EXECUTE FUNCTION "${schema}".audit_delete()`,
    );
    // Seeds: dead holders and stale results (must go), a live holder past its ttl and fresh results (must stay).
    const seed = (scope: string, state: string, lease: string | null, expires: string) =>
      admin.query(
        `INSERT INTO ${t} (id, scope, "key", state, lease_id, lease_expires_at, expires_at, payload, created_at, completed_at)
         SELECT sha256(convert_to($1 || g, 'UTF8')), $1, 'seed-' || g, $2,
                CASE WHEN $2 = 'IN_PROGRESS' THEN gen_random_uuid() END,
                now() + $3::interval, now() + $4::interval,
                CASE WHEN $2 = 'COMPLETE' THEN convert_to('v1', 'UTF8') END, now() - interval '2 hours',
                CASE WHEN $2 = 'COMPLETE' THEN now() - interval '1 hour' END
         FROM generate_series(1, $5::int) g`,
        [scope, state, lease, expires, SEEDED],
      );
    await seed('seed.dead-holder', 'IN_PROGRESS', '-1 minute', '-1 minute');
    await seed('seed.stale-result', 'COMPLETE', null, '-1 minute');
    await seed('seed.live-holder', 'IN_PROGRESS', '1 hour', '-1 minute');
    await seed('seed.fresh-result', 'COMPLETE', null, '1 hour');

    const env = { PG_URL: testDatabaseUrl(), SCHEMA: schema, POOL: 6 };
    workers = await Promise.all(
      Array.from({ length: INSTANCES }, (_, i) => startChild('worker', `instance ${i + 1}`, env)),
    );
  }, 120_000);

  afterAll(() => tearDownFaultCase(admin, schema));

  it('never deletes a live IN_PROGRESS record or an unexpired COMPLETE record', async () => {
    for (const w of workers) {
      w.send({
        cmd: 'purge-traffic',
        id: 'p',
        scope: SCOPE,
        durationMs: TRAFFIC_MS,
        concurrency: 6,
        purgeLimit: 50,
      });
    }
    const stats: PurgeTrafficStats[] = [];
    for (const w of workers) {
      stats.push((await w.waitFor('the traffic', is.purgeTraffic('p'), TRAFFIC_MS + 60_000)).stats);
    }
    const sum = (pick: (s: PurgeTrafficStats) => number) =>
      stats.reduce((total, s) => total + pick(s), 0);
    const total = {
      keys: sum((s) => s.keys),
      rechecks: sum((s) => s.rechecks),
      replayed: sum((s) => s.rechecksReplayed),
      lost: sum((s) => s.rechecksLost),
      afterTtl: sum((s) => s.rechecksAfterTtl),
      long: sum((s) => s.longActions),
      runs: sum((s) => s.purgeRuns),
      purged: sum((s) => s.purged),
    };
    expect(stats.flatMap((s) => s.errors)).toEqual([]);
    expect(total.lost).toBe(0);
    expect(total.rechecks).toBe(total.keys);
    expect(total.replayed + total.afterTtl).toBe(total.rechecks);
    expect(total.long).toBeGreaterThan(0);
    // Live records lost from under their holders would show here.
    const lost = workers.flatMap(eventsOf).filter((e) => e.type === 'lease-lost');
    expect(lost).toEqual([]);

    const [audit] = await admin.query(
      `SELECT
         count(*)::int AS deleted,
         count(*) FILTER (WHERE by_purge)::int AS purged,
         count(*) FILTER (WHERE by_purge AND state = 'IN_PROGRESS')::int AS purged_in_progress,
         count(*) FILTER (WHERE state = 'COMPLETE' AND expires_at > at)::int AS unexpired_complete,
         count(*) FILTER (WHERE state = 'IN_PROGRESS' AND (lease_expires_at > at OR expires_at > at))::int AS live_in_progress
       FROM "${schema}".deletions
       -- Each store's init() writes, reads back and deletes a record of its own (the byte probe).
       WHERE scope <> $1`,
      [PROBE_SCOPE],
    );
    expect(audit).toMatchObject({ unexpired_complete: 0, live_in_progress: 0 });
    expect(audit.deleted).toBe(audit.purged); // nothing else deletes here
    // The purges did real work, side by side: the counts add up.
    expect(audit.purged).toBe(total.purged);
    expect(total.purged).toBeGreaterThan(2 * SEEDED);

    const survivors: { scope: string; n: number }[] = await admin.query(
      `SELECT scope, count(*)::int AS n FROM "${schema}".idempotency_records
       WHERE scope LIKE 'seed.%' GROUP BY scope ORDER BY scope`,
    );
    expect(survivors).toEqual([
      { scope: 'seed.fresh-result', n: SEEDED },
      { scope: 'seed.live-holder', n: SEEDED },
    ]);

    // Every key ran once, plus once more for each re-run that came after its ttl.
    const [{ executions }] = await admin.query(
      `SELECT count(*)::int AS executions FROM "${schema}".executions`,
    );
    expect(executions).toBe(total.keys + total.afterTtl);
    const keys: { key: string }[] = await admin.query(
      `SELECT DISTINCT "key" FROM "${schema}".executions`,
    );
    expectNoRawKeys(
      workers.map((w) => w.output()).join('\n'),
      keys.map((k) => k.key),
    );
    expect(workers.map((w) => w.output()).join('')).not.toMatch(/lease .* was lost/);

    recordResult({
      case: 8,
      title: 'Purge concurrent with traffic (3 instances)',
      executionsExpected: total.keys + total.afterTtl,
      executionsObserved: executions,
      recordsLost: total.lost + audit.unexpired_complete + audit.live_in_progress,
      maxRecoveryMs: null,
      notes:
        `${INSTANCES} worker processes, ${TRAFFIC_MS} ms of traffic (ttl 0.3–1 s, lease 400 ms) with purge ` +
        `runs back to back (limit 50): ${total.runs} runs deleted ${total.purged} records ` +
        `(${audit.purged_in_progress} expired IN_PROGRESS); ${total.keys} keys, ${total.long} of them ` +
        `running past their ttl on a renewed lease; ${total.replayed} re-runs inside the ttl all replayed ` +
        `(${total.afterTtl} fell after the ttl and ran again, as they should); deletions of a live ` +
        `IN_PROGRESS / unexpired COMPLETE record: ${audit.live_in_progress} / ${audit.unexpired_complete}; ` +
        `seeded ${SEEDED} live + ${SEEDED} fresh records all kept`,
    });
  }, 120_000);
});
