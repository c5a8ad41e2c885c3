import { Test } from '@nestjs/testing';
import {
  IdempotencyConfigError,
  IdempotencyModule,
  IdempotencyModuleOptions,
  InMemoryIdempotencyStore,
} from 'nest-idempotency';

/** The module's own options fail the bootstrap even when no handler uses them yet. */
describe('IdempotencyModule options at bootstrap', () => {
  const boot = (options: Partial<IdempotencyModuleOptions>) =>
    Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({
          store: new InMemoryIdempotencyStore(),
          purge: false,
          ...options,
        }),
      ],
    }).compile();

  it.each([
    [
      { defaults: { lease: 'soon' } },
      /IdempotencyModule: option "defaults\.lease" has an invalid duration "soon"/,
    ],
    [
      { defaults: { waitTimeout: -1 } },
      /option "defaults\.waitTimeout" must be zero or more, got -1/,
    ],
    [{ defaults: { ttl: 'PT0S' } }, /option "defaults\.ttl" must be greater than zero/],
    [
      { http: { maxKeyLength: 0 } },
      /option "http\.maxKeyLength" must be a positive integer, got 0/,
    ],
    [{ http: { maxBodyBytes: 1.5 } }, /option "http\.maxBodyBytes" must be a positive integer/],
    [{ http: { keyHeader: 'Idempotency Key' } }, /option "http\.keyHeader" must be a header name/],
  ])('refuses %j', async (options, message) => {
    const attempt = boot(options as Partial<IdempotencyModuleOptions>);
    await expect(attempt).rejects.toBeInstanceOf(IdempotencyConfigError);
    await expect(attempt).rejects.toThrow(message);
  });

  it('starts with valid options', async () => {
    const moduleRef = await boot({
      defaults: { lease: '5s', waitTimeout: 0, ttl: 'P1D' },
      http: { keyHeader: 'X-Request-Key' },
    });
    await moduleRef.close();
  });
});
