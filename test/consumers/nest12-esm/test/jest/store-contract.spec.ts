import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';

// The conformance kit under Jest in ES-module mode, with Jest's globals.
const schema = `consumer_jest_${Date.now().toString(36)}`;

async function open(): Promise<DataSource> {
  return new DataSource({ type: 'postgres', url: process.env.DATABASE_URL }).initialize();
}

describeIdempotencyStoreContract(
  'TypeOrmIdempotencyStore in a Nest 12 ESM application under Jest',
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
  { scale: { raceIterations: 500 } },
);
