import type { IdempotencyStore } from 'nest-idempotency';
import { TypeOrmIdempotencyStore } from 'nest-idempotency/typeorm';
import { DataSource } from 'typeorm';
import { dropSchema, openDataSource, scratchSchema, testDatabaseUrl } from './postgres';
import { parsePgUrl, TcpProxy } from './tcp-proxy';

export interface CuttableStore {
  /** The real PostgreSQL store, on connections that go through the proxy. */
  store: IdempotencyStore;
  /** Drops every connection and refuses new ones: the store is down. */
  cut(): Promise<void>;
  /** Lets connections through again. */
  restore(): Promise<void>;
  /** Drops the schema and closes everything. Call after the app closed. */
  close(): Promise<void>;
}

/**
 * A PostgreSQL store in a fresh schema whose server a test can cut off (a
 * TCP proxy in between), with a 1 s operation timeout, so a door's answer to
 * "the store is down" can be seen on the real store.
 */
export async function openCuttableStore(label: string): Promise<CuttableStore> {
  const schema = scratchSchema(label);
  const direct = await openDataSource();
  const target = parsePgUrl(testDatabaseUrl());
  const proxy = new TcpProxy(target.host, target.port);
  const viaProxy = new URL(testDatabaseUrl());
  viaProxy.hostname = '127.0.0.1';
  viaProxy.port = String(await proxy.start());
  const proxied: DataSource = await openDataSource({
    url: viaProxy.toString(),
    extra: { max: 5 },
  });
  return {
    store: new TypeOrmIdempotencyStore(proxied, {
      schema,
      ensureSchema: true,
      operationTimeoutMs: 1000,
    }),
    cut: () => proxy.cut(),
    restore: () => proxy.restore(),
    close: async () => {
      await proxied.destroy().catch(() => undefined);
      await proxy.cut();
      await dropSchema(direct, schema);
      await direct.destroy();
    },
  };
}
