import { randomBytes } from 'node:crypto';
import { DataSource, DataSourceOptions } from 'typeorm';

/** The server the test run uses (embedded, or IDEMPOTENCY_TEST_PG_URL). */
export function testDatabaseUrl(): string {
  const url = process.env.IDEMPOTENCY_TEST_PG_URL;
  if (!url)
    throw new Error('IDEMPOTENCY_TEST_PG_URL is not set; the globalSetup of the test run sets it');
  return url;
}

/** A fresh schema name per test file, so suites never see each other's rows. */
export function scratchSchema(prefix = 't'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

export async function openDataSource(extra: Partial<DataSourceOptions> = {}): Promise<DataSource> {
  const dataSource = new DataSource({
    type: 'postgres',
    url: testDatabaseUrl(),
    extra: { max: 20 },
    ...extra,
  } as DataSourceOptions);
  return dataSource.initialize();
}

export async function dropSchema(dataSource: DataSource, schema: string): Promise<void> {
  await dataSource.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}
