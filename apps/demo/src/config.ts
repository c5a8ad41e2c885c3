/**
 * Which database and which idempotency store the demo runs on, from the environment:
 *
 * - DATABASE_URL: the demo's own table (payments). `postgres://` (or none: an
 *   embedded PostgreSQL), `mysql://` or `mariadb://` (a `mysql` or `mariadb`
 *   DataSource). Unless DEMO_STORE says otherwise, the idempotency records
 *   live there too, created by the library's migrations.
 * - DEMO_STORE=redis: the idempotency records live in Redis instead, at
 *   REDIS_URL (key prefix DEMO_REDIS_PREFIX, default `demo:idem:`); the payments
 *   stay in the database, where an application's own data would.
 */
export type DemoDialect = 'postgres' | 'mysql' | 'mariadb';

export interface DemoStoreConfig {
  records: 'database' | 'redis';
  redis?: { url: string; keyPrefix: string };
}

/** The DataSource type for DATABASE_URL (read when the entities load: before any embedded server starts). */
export function demoDialect(url = process.env.DATABASE_URL): DemoDialect {
  if (!url) return 'postgres';
  const scheme = url.slice(0, url.indexOf(':'));
  if (scheme === 'mysql' || scheme === 'mariadb') return scheme;
  if (scheme === 'postgres' || scheme === 'postgresql') return 'postgres';
  throw new Error(
    `DATABASE_URL must start with postgres://, postgresql://, mysql:// or mariadb://, not ${scheme}://`,
  );
}

export function demoStore(env: Record<string, string | undefined> = process.env): DemoStoreConfig {
  const store = env.DEMO_STORE ?? 'database';
  if (store === 'database') return { records: 'database' };
  if (store !== 'redis') {
    throw new Error(`DEMO_STORE must be redis (or database, the default), not ${store}`);
  }
  if (!env.REDIS_URL) {
    throw new Error('DEMO_STORE=redis needs REDIS_URL, e.g. REDIS_URL=redis://127.0.0.1:6379');
  }
  return {
    records: 'redis',
    redis: { url: env.REDIS_URL, keyPrefix: env.DEMO_REDIS_PREFIX ?? 'demo:idem:' },
  };
}
