import net from 'node:net';
import { Client } from 'pg';
import { describe, expect, it } from 'vitest';
import { IdempotencyStoreUnavailableError } from '../../core/errors';
import { isMysqlUnavailable } from './mysql/unavailable';
import { isUnavailable } from './postgres/unavailable';
import { storeError } from './unavailable-error';

/** A loopback port nothing listens on: bound, then closed again. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('storeError', () => {
  it('names the product and the call, with the words of a refused connection', async () => {
    const client = new Client({ host: '127.0.0.1', port: await closedPort(), user: 'x' });
    const refused = await client.connect().then(
      () => undefined,
      (error: unknown) => error,
    );
    const mapped = storeError(refused, 'PostgreSQL', 'acquire', isUnavailable);
    expect(mapped).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect((mapped as Error).message).toMatch(
      /^PostgreSQL is unavailable during acquire: .*ECONNREFUSED/,
    );
    expect((mapped as Error).cause).toBe(refused);
  });

  it('spells out an AggregateError without a message by its parts', () => {
    const both = Object.assign(
      new AggregateError(
        [
          new Error('connect ECONNREFUSED ::1:3306'),
          new Error('connect ECONNREFUSED 127.0.0.1:3306'),
        ],
        '',
      ),
      { code: 'ECONNREFUSED' },
    );
    const mapped = storeError(both, 'MariaDB', 'complete', isMysqlUnavailable) as Error;
    expect(mapped.message).toBe(
      'MariaDB is unavailable during complete: connect ECONNREFUSED ::1:3306; connect ECONNREFUSED 127.0.0.1:3306',
    );
  });

  it('leaves an error that is not about reaching the server as it came, and a typed one as it is', () => {
    const syntax = Object.assign(new Error('syntax error at or near "SELEC"'), { code: '42601' });
    expect(storeError(syntax, 'PostgreSQL', 'acquire', isUnavailable)).toBe(syntax);
    const typed = new IdempotencyStoreUnavailableError(
      'PostgreSQL did not answer acquire within 5 ms',
    );
    expect(storeError(typed, 'PostgreSQL', 'acquire', isUnavailable)).toBe(typed);
  });
});
