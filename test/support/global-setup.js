// Starts a real embedded PostgreSQL for the test run unless IDEMPOTENCY_TEST_PG_URL
// names a server already. Workers inherit the URL through the environment.

// Whether RabbitMQ answers decides if the broker suite runs. On CI
// (IDEMPOTENCY_TEST_REQUIRE_RABBITMQ=1) an unreachable broker fails the run.
async function probeRabbitMq() {
  const url = process.env.IDEMPOTENCY_TEST_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672';
  process.env.IDEMPOTENCY_TEST_AMQP_URL = url;
  try {
    const connection = await require('amqplib').connect(url, { timeout: 2000 });
    await connection.close();
    process.env.IDEMPOTENCY_TEST_RABBITMQ = 'available';
  } catch (error) {
    if (process.env.IDEMPOTENCY_TEST_REQUIRE_RABBITMQ === '1') {
      throw new Error(
        `RabbitMQ is required (IDEMPOTENCY_TEST_REQUIRE_RABBITMQ=1) but ${url} is unreachable: ${error.message}`,
      );
    }
    process.env.IDEMPOTENCY_TEST_RABBITMQ = 'unavailable';
    console.warn(
      `\n[tests] RabbitMQ suite will be skipped: ${url} is unreachable (${error.message}). ` +
        'Start a broker (e.g. `rabbitmq-server -detached`) or set IDEMPOTENCY_TEST_AMQP_URL.',
    );
  }
}

module.exports = async function globalSetup() {
  await probeRabbitMq();
  if (process.env.IDEMPOTENCY_TEST_PG_URL) {
    console.log(
      `\n[tests] PostgreSQL: ${process.env.IDEMPOTENCY_TEST_PG_URL} (IDEMPOTENCY_TEST_PG_URL)`,
    );
    return;
  }
  // The shared tool is TypeScript; load it through ts-node here (globalSetup is plain JS).
  require('ts-node').register({
    transpileOnly: true,
    compilerOptions: { module: 'commonjs', moduleResolution: 'node' },
  });
  const { startEmbeddedPostgres } = require('../../tools/embedded-postgres');
  const server = await startEmbeddedPostgres({ database: 'test' });
  process.env.IDEMPOTENCY_TEST_PG_URL = server.url;
  globalThis.__EMBEDDED_PG__ = server;
  const port = server.port;
  console.log(`\n[tests] PostgreSQL: embedded server on port ${port}`);
};
