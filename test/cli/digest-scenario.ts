import {
  encodeValue,
  IdempotencyStore,
  keyDigest,
  Lease,
  StrictModeSupport,
  storedScope,
} from 'nest-idempotency';
import { CliRun } from './cli-harness';

const SCOPE = 'Digest.charge';
/** Non-ASCII on purpose: the SQL stores hash on the server, and must hash UTF-8 as keyDigest does. */
const TENANT = 'tënant-𝄞-acme';
const KEY = 'clé-ünïcødé-✓-𝄞';
const PLAIN = 'raw-digest-plain-5c1e';

/**
 * `inspect` and `resolve` by digest, on any store the CLI opens, as an
 * operator runs them from a log line: `<scope>/#<digest>` in one argument,
 * or `<scope> '#<digest>'`. A tenant's record is found by the digest the logs
 * print (over the tenant and the key) under the handler's scope; a stored
 * scope with its tenant narrows the search to that tenant. A digest that
 * names two records (here: a record whose raw key is `#<digest>` of another)
 * is refused with exit 7 and nothing changes. `on` runs the CLI against the
 * store's records; `where` is how the CLI names them.
 */
export async function expectDigestLookups(
  store: IdempotencyStore & { strictMode: StrictModeSupport },
  on: (...args: string[]) => Promise<CliRun>,
  where: string,
): Promise<void> {
  const acquire = async (scope: string, key: string): Promise<Lease> => {
    const result = await store.tryAcquire({
      scope,
      key,
      leaseMs: 600_000,
      ttlMs: 3_600_000,
      waitTimeoutMs: 0,
      fingerprint: null,
    });
    if (result.kind !== 'acquired') throw new Error(`digest seed: ${result.kind}`);
    return result.lease;
  };
  const tenantScope = storedScope(SCOPE, TENANT);
  await store.complete(await acquire(SCOPE, PLAIN), encodeValue({ id: 1 }));
  await store.strictMode.markAmbiguous(await acquire(tenantScope, KEY), 'action-failed');
  // The same raw key under another tenant: another record, another digest.
  await store.complete(await acquire(storedScope(SCOPE, 'tenant-b'), KEY), encodeValue('b'));
  const plain = keyDigest(SCOPE, PLAIN); // Digest.charge/#<12 hex>
  const plainHex = plain.slice(-12);
  // A raw key that looks like the digest of another record.
  await store.complete(await acquire(SCOPE, `#${plainHex}`), encodeValue('lookalike'));
  const rawKeys = [PLAIN, KEY, `#${plainHex}`];
  const expectNoRawKeys = (run: CliRun) => {
    for (const key of rawKeys.slice(0, 2)) expect(run.stdout + run.stderr).not.toContain(key);
  };

  // As a log line names it, in one argument; upper-case hex too.
  for (const name of [plain, `${SCOPE}/#${plainHex.toUpperCase()}`]) {
    const run = await on('inspect', name);
    expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
    expect(run.stdout).toMatch(new RegExp(`│ key digest\\s+│ ${escape(plain)}\\s+│`));
    expect(run.stdout).toContain(`payload (as stored, after sanitize):\n{\n  "id": 1\n}`);
    expectNoRawKeys(run);
  }

  // A tenant's record, by the digest the logs print for it (over the tenant and the key).
  const logged = keyDigest(SCOPE, KEY, TENANT);
  const byLog = await on('inspect', logged, '--json');
  expect(byLog.code).toBe(0);
  expect(JSON.parse(byLog.stdout).record).toMatchObject({
    scope: tenantScope,
    key: KEY,
    keyDigest: logged,
    state: 'AMBIGUOUS',
  });
  const text = await on('inspect', logged);
  expect(text.stdout).toMatch(
    new RegExp(
      `│ ambiguous\\s+│ \\S+Z \\(.*\\), action-failed; resolve it: nest-idempotency resolve ${escape(logged)} --completed or --not-executed\\s+│`,
    ),
  );
  expect(text.stdout).toMatch(/│ expires\s+│ never: kept until it is resolved\s+│/);
  expectNoRawKeys(text);
  // The stored scope, as list --json shows it, with the digest apart: that tenant only.
  const loggedHex = `#${logged.slice(-12)}`;
  expect((await on('inspect', tenantScope, loggedHex)).code).toBe(0);
  const otherTenant = await on('inspect', storedScope(SCOPE, 'tenant-b'), loggedHex);
  expect(otherTenant).toEqual({
    code: 5,
    stdout: '',
    stderr: `error: no record for ${logged} in ${where}\n`,
  });

  // `#<digest>` as a second argument is also a raw key: here two records answer to it.
  const several = await on('inspect', SCOPE, `#${plainHex}`);
  expect(several.code).toBe(7);
  expect(several.stderr).toBe(
    `error: ${plain} names 2 records in ${where}: nothing was done; name the one you mean by its scope and raw key (--json prints them)\n`,
  );
  // Both are listed, each by its own digest, as `list` shows records.
  for (const key of [PLAIN, `#${plainHex}`]) {
    expect(several.stdout).toMatch(
      new RegExp(`^${escape(SCOPE)}\\s+#${keyDigest(SCOPE, key).slice(-12)}\\s+COMPLETE\\s`, 'm'),
    );
  }
  expectNoRawKeys(several);
  const severalJson = await on('inspect', SCOPE, `#${plainHex}`, '--json');
  expect(severalJson.code).toBe(7);
  const matches = JSON.parse(severalJson.stdout) as {
    name: string;
    matches: Array<{ key: string }>;
  };
  expect(matches.name).toBe(plain);
  expect(matches.matches.map((m) => m.key).sort()).toEqual([PLAIN, `#${plainHex}`].sort());
  // resolve acts on no record of an ambiguous name, whatever their state.
  const refused = await on('resolve', SCOPE, `#${plainHex}`, '--not-executed');
  expect(refused.code).toBe(7);
  expect((await store.find({ scope: SCOPE, key: PLAIN }))?.state).toBe('COMPLETE');
  expect((await store.find({ scope: SCOPE, key: `#${plainHex}` }))?.state).toBe('COMPLETE');

  // resolve by the logged name: the tenant's record, and only it.
  const resolved = await on('resolve', logged, '--completed', '--payload', '{"id":2}');
  expect(resolved.stderr).toBe('');
  expect(resolved.stdout).toMatch(
    new RegExp(`^resolved ${escape(logged)} in ${escape(where)} as completed by cli:local at `),
  );
  expect(resolved.code).toBe(0);
  expectNoRawKeys(resolved);
  expect(await store.find({ scope: tenantScope, key: KEY })).toMatchObject({
    state: 'COMPLETE',
    resolvedBy: 'cli:local',
  });
  expect((await store.find({ scope: storedScope(SCOPE, 'tenant-b'), key: KEY }))?.state).toBe(
    'COMPLETE',
  );
  const missing = await on('resolve', `${SCOPE}/#000000000000`, '--not-executed');
  expect(missing.stderr).toBe(`error: no record for ${SCOPE}/#000000000000 in ${where}\n`);
  expect(missing.code).toBe(5);
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}
