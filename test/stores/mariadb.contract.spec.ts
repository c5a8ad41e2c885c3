import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
import { mariadbHarness } from '../support/mariadb-harness';
import { mariadbAvailable } from '../support/mariadb';

/**
 * The whole conformance kit against the machine's MariaDB, two instances on
 * two pools. `mariadb` DataSources read rows back with RETURNING (MariaDB
 * 10.5+); `mysql` DataSources send the statements MySQL 8 gets (no
 * RETURNING), here run on MariaDB since MySQL cannot be installed.
 */
const cases = [
  ['mariadb', true],
  ['mariadb', false],
  ['mysql', true],
] as const;

describe.runIf(mariadbAvailable())('MariaDB', () => {
  for (const [type, preparedStatements] of cases) {
    describeIdempotencyStoreContract(
      `TypeOrmIdempotencyStore (MariaDB, DataSource type ${type}, preparedStatements: ${preparedStatements})`,
      () => mariadbHarness('contract', { type, preparedStatements }),
      { strictMode: true, steps: true, continuations: true },
    );
  }
});
