import { defineConfig } from 'vitest/config';

/**
 * One runner for both supported stacks (Nest 12 ESM-only, Nest 11 CommonJS):
 * Vitest 4 on Vite 8, whose Oxc transform emits decorator metadata from
 * tsconfig's `emitDecoratorMetadata`, which Nest's constructor injection needs.
 * Dependencies are not transformed: Node loads them as they ship (ESM or CJS).
 *
 * `npm test` runs the unit, store and e2e projects. Two more run only when
 * selected: the fault suite (minutes; kills processes, restarts PostgreSQL),
 * `npm run test:faults`, and the consumer fixtures (npm installs from the
 * registry), `npm run test:consumers`.
 */
const ROOT = import.meta.dirname;
const SRC = `${ROOT}/libs/idempotency/src`;

/** The package's entry points, resolved to the sources (the same map as tsconfig.json's paths). */
const alias = [
  { find: /^nest-idempotency$/, replacement: `${SRC}/index.ts` },
  {
    find: /^nest-idempotency\/(core|store-kit|typeorm|pg|mysql|testing|opentelemetry|redis)$/,
    replacement: `${SRC}/$1.ts`,
  },
];

/** The fault suite and the consumer fixtures run only when their project is named. */
const selected = (name: string) =>
  process.argv.some(
    (arg, i, argv) => arg === `--project=${name}` || (arg === '--project' && argv[i + 1] === name),
  );

const common = {
  globals: true,
  testTimeout: 30_000,
  hookTimeout: 30_000,
  pool: 'forks' as const,
};

/**
 * The one unhandled rejection the suite tolerates: Nest 11's RabbitMQ server,
 * closed while a reply it published is unconfirmed, lets
 * amqp-connection-manager reject that publish with "Channel closed" and
 * handles nothing (seen once in test/rpc/rabbitmq.e2e-spec.ts's teardown on
 * the Nest 11 stack, every test passing). Anything else fails the run.
 */
function isRabbitTeardownNoise(error: Error): boolean {
  return (
    error.message === 'Channel closed' &&
    /amqp-connection-manager[\\/].*ChannelWrapper/.test(error.stack ?? '')
  );
}

export default defineConfig({
  resolve: { alias },
  test: {
    onUnhandledError: (error) => !isRabbitTeardownNoise(error),
    globalSetup: ['./test/support/global-setup.ts'],
    projects: [
      { resolve: { alias }, test: { ...common, name: 'unit', include: ['libs/**/*.spec.ts'] } },
      {
        resolve: { alias },
        test: { ...common, name: 'store', include: ['test/stores/**/*.spec.ts'] },
      },
      {
        resolve: { alias },
        test: { ...common, name: 'e2e', include: ['test/**/*.e2e-spec.ts'] },
      },
      ...(selected('consumers')
        ? [
            {
              resolve: { alias },
              test: {
                ...common,
                name: 'consumers',
                include: ['test/consumers/*.consumer-spec.ts'],
                fileParallelism: false,
              },
            },
          ]
        : []),
      ...(selected('faults')
        ? [
            {
              resolve: { alias },
              test: {
                ...common,
                name: 'faults',
                include: ['test/faults/**/*.fault-spec.ts'],
                globalSetup: ['./test/faults/support/results.ts'],
                fileParallelism: false,
              },
            },
          ]
        : []),
    ],
  },
});
