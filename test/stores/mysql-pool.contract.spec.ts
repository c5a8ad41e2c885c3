import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { mariadbAvailable } from '../support/mariadb';
import { mysqlPoolHarness } from './mysql-pool-harness';

/**
 * The whole conformance kit on the machine's MariaDB through a mysql2 pool of
 * the application's own: the callback pool (prepared statements on and off)
 * and the `mysql2/promise` pool.
 */
const cases = [
  ['callback', true],
  ['callback', false],
  ['promise', true],
] as const;

describe.runIf(mariadbAvailable())('MariaDB', () => {
  for (const [api, preparedStatements] of cases) {
    describeIdempotencyStoreContract(
      `MysqlIdempotencyStore (MariaDB, a mysql2 ${api} pool, preparedStatements: ${preparedStatements})`,
      () => mysqlPoolHarness('mypool', api, { preparedStatements }),
      { strictMode: true, steps: true, continuations: true },
    );
  }
});
