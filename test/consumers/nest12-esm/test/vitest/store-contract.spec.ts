import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import * as vitest from 'vitest';

// The conformance kit under Vitest without `globals: true`: the runner is passed in.
const schema = `consumer_kit_${Date.now().toString(36)}`;

async function open(): Promise<DataSource> {
  return new DataSource({ type: 'postgres', url: process.env.DATABASE_URL }).initialize();
}

describeIdempotencyStoreContract(
  'TypeOrmIdempotencyStore in a Nest 12 ESM application',
  async () => {
    const a = await open();
    const b = await open();
    return {
      store: new TypeOrmIdempotencyStore(a, { schema, ensureSchema: true }),
      other: new TypeOrmIdempotencyStore(b, { schema, pollIntervalMs: 60_000 }),
      close: async () => {
        await a.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await a.destroy();
        await b.destroy();
      },
    };
  },
  { runner: vitest, scale: { raceIterations: 500 } },
);
