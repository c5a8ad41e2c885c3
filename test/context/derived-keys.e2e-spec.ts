import { fork } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import path from 'node:path';
import { IdempotencyEngine, type IdempotencyContext, keyDigest } from 'nest-idempotency';
import { describeEachStore, type OpenedStore, openStore } from '../support/stores';
import type { ContextReport } from './context-worker';

const ROOT = path.resolve(__dirname, '../..');
const WORKER = path.join(__dirname, 'context-worker.ts');
const quiet = { warn: () => undefined, error: () => undefined };

/**
 * Forks an engine process that takes `key`'s record, reports its context
 * and holds the record; resolves with the report and the process, which the
 * caller kills.
 */
async function holdInChild(
  storeEnv: Record<string, string>,
  call: { scope: string; key: string; tenant?: string; secret: Buffer },
) {
  const child = fork(WORKER, [], {
    cwd: ROOT,
    execArgv: ['-r', '@swc-node/register'],
    env: {
      ...process.env,
      SWC_NODE_PROJECT: path.join(ROOT, 'tsconfig.json'),
      ...storeEnv,
      CTX_SCOPE: call.scope,
      CTX_KEY: call.key,
      CTX_TENANT: call.tenant ?? '',
      CTX_SECRET: call.secret.toString('hex'),
    },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const chunks: Buffer[] = [];
  child.stdout!.on('data', (c: Buffer) => chunks.push(c));
  child.stderr!.on('data', (c: Buffer) => chunks.push(c));
  const report = await new Promise<ContextReport>((resolve, reject) => {
    child.once('message', (message) => resolve(message as ContextReport));
    child.once('exit', (code, signal) =>
      reject(
        new Error(
          `worker exited (${code ?? signal}) before reporting:\n${Buffer.concat(chunks).toString()}`,
        ),
      ),
    );
  });
  return { report, child };
}

describeEachStore('Derived keys across processes and a takeover', (storeName) => {
  let opened: OpenedStore;
  const secret = randomBytes(32);
  const scope = `derived_${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    opened = await openStore(storeName, 'ctx_dk');
  }, 60_000);

  afterAll(async () => {
    await opened?.cleanup();
  });

  it('gives the attempt that takes over a killed holder the same record digest and derived keys', async () => {
    const key = `order-${randomUUID()}`;
    const tenant = `tenant-${randomUUID()}`;
    const { report, child } = await holdInChild(opened.env, { scope, key, tenant, secret });
    expect(report.attempt).toBe('first');
    expect(report.pid).not.toBe(process.pid);
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;

    // This process: another engine on the same records, which waits out the dead holder's lease.
    const engine = new IdempotencyEngine(opened.store, { logger: quiet, derivedKeys: { secret } });
    const policy = engine.policy({ scope, lease: '1s', waitTimeout: '20s', ttl: '1h' });
    let seen: IdempotencyContext | undefined;
    const outcome = await engine.run(policy, { key, tenant }, async (_signal, ctx) => {
      seen = ctx;
      return { charge: ctx.deriveKey('charge'), email: ctx.deriveKey('email') };
    });
    expect(outcome.kind).toBe('executed');
    expect(seen!.attempt).toBe('takeover');
    expect(seen!.keyDigest).toBe(report.keyDigest);
    expect(report.keyDigest).toBe(keyDigest(scope, key, tenant));
    expect(outcome.value).toEqual({ charge: report.charge, email: report.email });
    expect(report.charge).not.toBe(report.email);
    for (const derived of [report.charge, report.email]) {
      expect(derived).toMatch(/^[\x21-\x7e]{1,64}$/);
      expect(derived).not.toContain(key);
      expect(derived).not.toContain(tenant);
    }

    // A later process with another secret derives other keys for the same record.
    const rotated = new IdempotencyEngine(opened.store, {
      logger: quiet,
      derivedKeys: { secret: randomBytes(32) },
    });
    const other = await rotated.run(
      rotated.policy({ scope: `${scope}_b`, ttl: '1h' }),
      { key, tenant },
      async (_signal, ctx) => ctx.deriveKey('charge'),
    );
    expect(other.value).not.toBe(report.charge);
  }, 60_000);

  it.runIf(storeName !== 'redis')(
    'hands a transactional action the context as its third argument',
    async () => {
      const engine = new IdempotencyEngine(opened.store, {
        logger: quiet,
        derivedKeys: { secret },
      });
      const key = `order-${randomUUID()}`;
      const outcome = await engine.runInTransaction(
        engine.policy({ scope, ttl: '1h' }),
        { key },
        async (_tx, _signal, ctx) => ({ digest: ctx.keyDigest, charge: ctx.deriveKey('charge') }),
      );
      const again = await engine.run(
        engine.policy({ scope: `${scope}_c`, ttl: '1h' }),
        { key },
        async (_signal, ctx) => ctx.deriveKey('charge'),
      );
      expect(outcome.value.digest).toBe(keyDigest(scope, key));
      expect(outcome.value.charge).toMatch(/^[\x21-\x7e]{1,64}$/);
      // Another scope, another record: another key.
      expect(again.value).not.toBe(outcome.value.charge);
    },
  );

  it('gives a retry after a thrown action the first attempt and the same derived key', async () => {
    const engine = new IdempotencyEngine(opened.store, { logger: quiet, derivedKeys: { secret } });
    const policy = engine.policy({ scope, ttl: '1h' });
    const key = `order-${randomUUID()}`;
    let first: string | undefined;
    await expect(
      engine.run(policy, { key }, async (_signal, ctx) => {
        first = ctx.deriveKey('charge');
        throw new Error('the provider timed out');
      }),
    ).rejects.toThrow('the provider timed out');
    const retry = await engine.run(policy, { key }, async (_signal, ctx) => ({
      attempt: ctx.attempt,
      charge: ctx.deriveKey('charge'),
    }));
    expect(retry).toMatchObject({ kind: 'executed', value: { attempt: 'first', charge: first } });
  });
});
