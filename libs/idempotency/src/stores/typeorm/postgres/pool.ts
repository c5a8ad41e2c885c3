import type { Pool } from 'pg';
import type { DataSource } from 'typeorm';

/**
 * The `pg` pool under a postgres DataSource (TypeORM keeps it as the driver's
 * `master`); undefined before `initialize()` and after `destroy()`.
 */
export function poolOf(dataSource: DataSource): Pool | undefined {
  return (dataSource.driver as unknown as { master?: Pool }).master;
}
