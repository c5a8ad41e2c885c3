/**
 * One engine process for derived-keys.e2e-spec.ts, started with
 *   node -r @swc-node/register test/context/context-worker.ts
 * Env: the records' store as test/support/stores.ts describes it (IDEM_STORE,
 * IDEM_STORE_URL, IDEM_STORE_NAMESPACE), CTX_SCOPE, CTX_KEY, CTX_TENANT
 * (optional), CTX_SECRET (hex). Runs one call whose action sends the parent
 * what its context says (`ContextReport`) and then never returns, holding the
 * record with its heartbeat until the parent kills the process.
 */
import { IdempotencyEngine } from 'nest-idempotency';
import { storeFromEnv } from '../support/stores';

export interface ContextReport {
  pid: number;
  keyDigest: string;
  attempt: string;
  charge: string;
  email: string;
}

async function main(): Promise<void> {
  const records = await storeFromEnv(process.env);
  const engine = new IdempotencyEngine(records.store, {
    logger: { warn: () => undefined, error: () => undefined },
    derivedKeys: { secret: Buffer.from(required('CTX_SECRET'), 'hex') },
  });
  const policy = engine.policy({ scope: required('CTX_SCOPE'), lease: '1s', ttl: '1h' });
  await engine.run(
    policy,
    { key: required('CTX_KEY'), tenant: process.env.CTX_TENANT || undefined },
    async (_signal, ctx) => {
      const report: ContextReport = {
        pid: process.pid,
        keyDigest: ctx.keyDigest,
        attempt: ctx.attempt,
        charge: ctx.deriveKey('charge'),
        email: ctx.deriveKey('email'),
      };
      process.send!(report);
      // Holds the record (its heartbeat keeps beating) until the parent kills this process.
      return new Promise<never>(() => undefined);
    },
  );
}

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

process.on('disconnect', () => process.exit(0));
main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
