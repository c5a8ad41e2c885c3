import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import { startEmbeddedPostgres } from '../../tools/embedded-postgres';

export interface BenchServer {
  url: string;
  /** How the server was obtained, for the report (password masked). */
  describe: string;
  external: boolean;
  stop: () => Promise<void>;
}

/** Embedded PostgreSQL (as the tests use), or the server named by IDEMPOTENCY_BENCH_PG_URL. */
export async function startServer(): Promise<BenchServer> {
  const external = process.env.IDEMPOTENCY_BENCH_PG_URL;
  if (external) {
    const shown = new URL(external);
    shown.password = shown.password ? '***' : '';
    return {
      url: external,
      describe: `${shown} (IDEMPOTENCY_BENCH_PG_URL)`,
      external: true,
      stop: async () => {},
    };
  }
  const server = await startEmbeddedPostgres({ database: 'bench', maxConnections: 200 });
  return {
    url: server.url,
    describe: 'embedded-postgres, default settings (fsync and synchronous_commit on)',
    external: false,
    stop: () => server.stop(),
  };
}

/**
 * A TypeORM DataSource whose connections carry `applicationName` (see
 * driver-count). `keepConnections`: pooled connections are never closed for
 * being idle (pg's default closes them after 10 s), so alternating runs do not
 * reconnect, and their backends' CPU can be followed (lib/cpu.ts).
 */
export function openDataSource(
  url: string,
  applicationName: string,
  max: number,
  keepConnections = false,
) {
  return new DataSource({
    type: 'postgres',
    url,
    applicationName,
    extra: { max, ...(keepConnections ? { idleTimeoutMillis: 0 } : {}) },
  }).initialize();
}

/** PIDs of the server backends whose connections carry `applicationName`. */
export async function backendPids(admin: DataSource, applicationName: string): Promise<number[]> {
  const rows: { pid: number }[] = await admin.query(
    'SELECT pid FROM pg_stat_activity WHERE application_name = $1',
    [applicationName],
  );
  return rows.map((r) => Number(r.pid));
}

/** The `pg` Pool behind a TypeORM DataSource. */
export function poolOf(dataSource: DataSource): Pool {
  return (dataSource.driver as unknown as { master: Pool }).master;
}

export async function serverVersion(dataSource: DataSource): Promise<string> {
  const [{ server_version }] = await dataSource.query('SHOW server_version');
  return server_version as string;
}
