import { startEmbeddedPostgres } from '../../tools/embedded-postgres';

/**
 * Starts a real embedded PostgreSQL for the run unless IDEMPOTENCY_TEST_PG_URL
 * names a server already, and probes RabbitMQ. Test workers inherit both
 * answers through the environment. Returns the teardown.
 */
export default async function setup(): Promise<() => Promise<void>> {
  await probeRabbitMq();
  if (process.env.IDEMPOTENCY_TEST_PG_URL) {
    console.log(
      `\n[tests] PostgreSQL: ${process.env.IDEMPOTENCY_TEST_PG_URL} (IDEMPOTENCY_TEST_PG_URL)`,
    );
    return async () => undefined;
  }
  const server = await startEmbeddedPostgres({ database: 'test' });
  process.env.IDEMPOTENCY_TEST_PG_URL = server.url;
  process.env.IDEMPOTENCY_TEST_PG_EMBEDDED = '1';
  console.log(`\n[tests] PostgreSQL: embedded server on port ${server.port}`);
  return () => server.stop();
}

// Whether RabbitMQ answers decides if the broker suite runs. On CI
// (IDEMPOTENCY_TEST_REQUIRE_RABBITMQ=1) an unreachable broker fails the run.
async function probeRabbitMq(): Promise<void> {
  const url = process.env.IDEMPOTENCY_TEST_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672';
  process.env.IDEMPOTENCY_TEST_AMQP_URL = url;
  try {
    const amqp = await import('amqplib');
    const connection = await amqp.connect(url, { timeout: 2000 });
    await connection.close();
    process.env.IDEMPOTENCY_TEST_RABBITMQ = 'available';
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    if (process.env.IDEMPOTENCY_TEST_REQUIRE_RABBITMQ === '1') {
      throw new Error(
        `RabbitMQ is required (IDEMPOTENCY_TEST_REQUIRE_RABBITMQ=1) but ${url} is unreachable: ${reason}`,
      );
    }
    process.env.IDEMPOTENCY_TEST_RABBITMQ = 'unavailable';
    console.warn(
      `\n[tests] RabbitMQ suite will be skipped: ${url} is unreachable (${reason}). ` +
        'Start a broker (e.g. `rabbitmq-server -detached`) or set IDEMPOTENCY_TEST_AMQP_URL.',
    );
  }
}
