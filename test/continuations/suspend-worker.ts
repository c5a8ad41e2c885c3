/**
 * One engine process for continuations.e2e-spec.ts, started with
 *   node -r @swc-node/register test/continuations/suspend-worker.ts
 * Env: the records' store as test/support/stores.ts describes it (IDEM_STORE,
 * IDEM_STORE_URL, IDEM_STORE_NAMESPACE), CONT_SCOPE, CONT_KEY, CONT_HOLD,
 * CONT_SECRET (hex). Runs one call whose action records a step, then
 * suspends; sends the parent what it saw (`SuspendReport`) and exits.
 */
import { IdempotencyEngine } from 'nest-idempotency';
import { storeFromEnv } from '../support/stores';

export interface SuspendReport {
  pid: number;
  kind: string;
  continuation: string;
  answer: unknown;
  charge: string;
  keyDigest: string;
}

async function main(): Promise<void> {
  const records = await storeFromEnv(process.env);
  const engine = new IdempotencyEngine(records.store, {
    logger: { warn: () => undefined, error: () => undefined },
    derivedKeys: { secret: Buffer.from(required('CONT_SECRET'), 'hex') },
  });
  const policy = engine.policy({ scope: required('CONT_SCOPE'), lease: '2s', ttl: '1h' });
  let charge = '';
  let keyDigest = '';
  const outcome = await engine.run(policy, { key: required('CONT_KEY') }, async (_signal, ctx) => {
    charge = ctx.deriveKey('charge');
    keyDigest = ctx.keyDigest;
    const intent = await ctx.step('create-intent', () => ({ intent: `pi_${process.pid}` }));
    return ctx.suspend(
      { status: 'challenge', intent: intent.intent },
      {
        hold: required('CONT_HOLD'),
        state: { intent: intent.intent, amount: 500 },
      },
    );
  });
  if (outcome.kind !== 'suspended') throw new Error(`expected suspended, got ${outcome.kind}`);
  const report: SuspendReport = {
    pid: process.pid,
    kind: outcome.kind,
    continuation: outcome.continuation,
    answer: outcome.value,
    charge,
    keyDigest,
  };
  process.send!(report, () => {
    void records.close().then(() => process.exit(0));
  });
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
