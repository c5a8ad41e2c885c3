import { fork } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import path from 'node:path';
import {
  IdempotencyEngine,
  IdempotencyOutcomeUnknownError,
  IdempotencyResumptionRefusedError,
  type IdempotencyContext,
} from 'nest-idempotency';
import { describeEachStore, type OpenedStore, openStore } from '../support/stores';
import type { SuspendReport } from './suspend-worker';

const ROOT = path.resolve(__dirname, '../..');
const WORKER = path.join(__dirname, 'suspend-worker.ts');
const quiet = { warn: () => undefined, error: () => undefined };

/** Suspends `key`'s record in a process of its own, which exits once it reported. */
async function suspendInChild(
  storeEnv: Record<string, string>,
  call: { scope: string; key: string; hold: string; secret: Buffer },
): Promise<SuspendReport> {
  const child = fork(WORKER, [], {
    cwd: ROOT,
    execArgv: ['-r', '@swc-node/register'],
    env: {
      ...process.env,
      SWC_NODE_PROJECT: path.join(ROOT, 'tsconfig.json'),
      ...storeEnv,
      CONT_SCOPE: call.scope,
      CONT_KEY: call.key,
      CONT_HOLD: call.hold,
      CONT_SECRET: call.secret.toString('hex'),
    },
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const chunks: Buffer[] = [];
  child.stdout!.on('data', (c: Buffer) => chunks.push(c));
  child.stderr!.on('data', (c: Buffer) => chunks.push(c));
  return new Promise<SuspendReport>((resolve, reject) => {
    child.once('message', (message) => resolve(message as SuspendReport));
    child.once('exit', (code, signal) =>
      reject(
        new Error(
          `worker exited (${code ?? signal}) before reporting:\n${Buffer.concat(chunks).toString()}`,
        ),
      ),
    );
  });
}

async function refusal(call: Promise<unknown>): Promise<string> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(IdempotencyResumptionRefusedError);
  return (error as IdempotencyResumptionRefusedError).reason;
}

/**
 * Issue 25, requirement 4, through the engine: a record suspended in one
 * process is resumed in another, once, however many resumptions race for
 * it; a resumption after the hold lapsed is refused and the record goes the
 * ordinary way (taken over, or AMBIGUOUS in strict mode).
 */
describeEachStore('Continuations across processes', (storeName) => {
  let opened: OpenedStore;
  let engine: IdempotencyEngine;
  const secret = randomBytes(32);

  beforeAll(async () => {
    opened = await openStore(storeName, 'cont');
    engine = new IdempotencyEngine(opened.store, { logger: quiet, derivedKeys: { secret } });
  }, 60_000);

  afterAll(async () => {
    await opened?.cleanup();
  });

  it('suspends in one process; of eight racing resumptions in another exactly one is admitted, and its result completes the record', async () => {
    const scope = `pay_${randomUUID().slice(0, 8)}`;
    const key = randomUUID();
    const report = await suspendInChild(opened.env, { scope, key, hold: '1m', secret });
    expect(report.answer).toEqual({ status: 'challenge', intent: `pi_${report.pid}` });
    const policy = engine.policy({ scope, lease: '5s', ttl: '1h' });

    // A duplicate of the original key meanwhile gets the same answer and token; nothing runs.
    let reran = 0;
    const duplicate = await engine.run(policy, { key }, async () => ++reran);
    expect(duplicate).toEqual({
      kind: 'suspended',
      value: report.answer,
      continuation: report.continuation,
    });
    expect(reran).toBe(0);

    const seen: { resumed: unknown; attempt: string; charge: string; intent: unknown }[] = [];
    const resumeOnce = () =>
      engine.resume(policy, report.continuation, async (_signal, ctx: IdempotencyContext) => {
        const intent = await ctx.step('create-intent', () => ({ intent: 'ran again' }));
        seen.push({
          resumed: ctx.resumed,
          attempt: ctx.attempt,
          charge: ctx.deriveKey('charge'),
          intent,
        });
        return { status: 'paid', intent: (ctx.resumed as { intent: string }).intent };
      });
    const settled = await Promise.allSettled(Array.from({ length: 8 }, resumeOnce));
    const admitted = settled.filter((s) => s.status === 'fulfilled');
    expect(admitted).toHaveLength(1);
    for (const s of settled) {
      if (s.status === 'rejected') {
        expect(s.reason).toBeInstanceOf(IdempotencyResumptionRefusedError);
        expect((s.reason as IdempotencyResumptionRefusedError).reason).toBe('consumed');
      }
    }
    expect(seen).toEqual([
      {
        resumed: { intent: `pi_${report.pid}`, amount: 500 },
        attempt: 'resumption',
        // The same record: the same derived key as the suspended attempt's, and its recorded step.
        charge: report.charge,
        intent: { intent: `pi_${report.pid}` },
      },
    ]);
    const final = { status: 'paid', intent: `pi_${report.pid}` };
    expect((admitted[0] as PromiseFulfilledResult<unknown>).value).toEqual({
      kind: 'executed',
      value: final,
    });

    // Later duplicates of the original key replay the final answer; the token stays consumed.
    const after = await engine.run(policy, { key }, async () => ++reran);
    expect(after).toMatchObject({ kind: 'replayed', value: final });
    expect(reran).toBe(0);
    expect(await refusal(engine.resume(policy, report.continuation, async () => 'again'))).toBe(
      'consumed',
    );
  });

  it('refuses a resumption after the hold lapsed; the next attempt takes the record over', async () => {
    const scope = `pay_${randomUUID().slice(0, 8)}`;
    const key = randomUUID();
    const report = await suspendInChild(opened.env, { scope, key, hold: '300ms', secret });
    const policy = engine.policy({ scope, lease: '5s', ttl: '1h' });
    await new Promise((resolve) => setTimeout(resolve, 450));
    let ran = 0;
    expect(await refusal(engine.resume(policy, report.continuation, async () => ++ran))).toBe(
      'lapsed',
    );
    const next = await engine.run(policy, { key }, async (_signal, ctx) => {
      ran++;
      return ctx.attempt;
    });
    expect(next).toEqual({ kind: 'executed', value: 'takeover' });
    expect(ran).toBe(1);
    expect(await refusal(engine.resume(policy, report.continuation, async () => ++ran))).not.toBe(
      'consumed',
    );
  });

  it('in strict mode a lapsed hold makes the record AMBIGUOUS', async () => {
    const scope = `pay_${randomUUID().slice(0, 8)}`;
    const key = randomUUID();
    await suspendInChild(opened.env, { scope, key, hold: '300ms', secret });
    const strict = engine.policy({ scope, lease: '5s', ttl: '1h', onExpiredLease: 'refuse' });
    await new Promise((resolve) => setTimeout(resolve, 450));
    let ran = 0;
    await expect(engine.run(strict, { key }, async () => ++ran)).rejects.toBeInstanceOf(
      IdempotencyOutcomeUnknownError,
    );
    expect(ran).toBe(0);
  });

  it('refuses a malformed token and one of another scope, running nothing', async () => {
    const scope = `pay_${randomUUID().slice(0, 8)}`;
    const key = randomUUID();
    const report = await suspendInChild(opened.env, { scope, key, hold: '1m', secret });
    const other = engine.policy({ scope: `${scope}_other`, ttl: '1h' });
    let ran = 0;
    expect(await refusal(engine.resume(other, 'not-a-token', async () => ++ran))).toBe('invalid');
    expect(await refusal(engine.resume(other, report.continuation, async () => ++ran))).toBe(
      'unknown',
    );
    expect(ran).toBe(0);
    // Still resumable in its own scope.
    const own = engine.policy({ scope, ttl: '1h' });
    expect(await engine.resume(own, report.continuation, async () => 'done')).toEqual({
      kind: 'executed',
      value: 'done',
    });
  });
});
