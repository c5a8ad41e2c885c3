import { spawnSync } from 'node:child_process';

/**
 * The message brokers the transport suites talk to (NATS, Mosquitto): the
 * machine's own servers, probed before any test is registered. A suite whose
 * broker is unreachable is skipped with a warning that says how to start it,
 * unless its IDEMPOTENCY_TEST_REQUIRE_* variable is 1 (CI), where it fails.
 */
export interface Broker {
  label: string;
  url: string;
  /** IDEMPOTENCY_TEST_REQUIRE_NATS, IDEMPOTENCY_TEST_REQUIRE_MQTT. */
  requireVariable: string;
  /** How to start one, for the skip message. */
  hint: string;
}

export const NATS: Broker = {
  label: 'NATS',
  url: process.env.IDEMPOTENCY_TEST_NATS_URL || 'nats://127.0.0.1:4222',
  requireVariable: 'IDEMPOTENCY_TEST_REQUIRE_NATS',
  hint: 'start one with `nats-server -js -a 127.0.0.1 -p 4222 &` or set IDEMPOTENCY_TEST_NATS_URL',
};

export const MQTT: Broker = {
  label: 'Mosquitto (MQTT)',
  url: process.env.IDEMPOTENCY_TEST_MQTT_URL || 'mqtt://127.0.0.1:1883',
  requireVariable: 'IDEMPOTENCY_TEST_REQUIRE_MQTT',
  hint: 'start one with `mosquitto -d -p 1883` or set IDEMPOTENCY_TEST_MQTT_URL',
};

/** Whether something accepts a TCP connection at the URL's host and port within 2 s. */
function probeSync(url: string): { available: true } | { available: false; reason: string } {
  const { hostname, port } = new URL(url);
  const code = `
    const socket = require('node:net').connect({ host: process.env.PROBE_HOST, port: Number(process.env.PROBE_PORT) });
    socket.setTimeout(2000, () => { console.error('timed out'); process.exit(1); });
    socket.on('connect', () => { socket.destroy(); process.exit(0); });
    socket.on('error', (error) => { console.error(error.message); process.exit(1); });`;
  const probe = spawnSync(process.execPath, ['-e', code], {
    env: { ...process.env, PROBE_HOST: hostname, PROBE_PORT: port },
    encoding: 'utf8',
    timeout: 10_000,
  });
  if (probe.status === 0) return { available: true };
  const reason = (probe.stderr || probe.error?.message || `exit ${probe.status}`).trim();
  return { available: false, reason: reason.split('\n').pop() ?? reason };
}

/**
 * `describe` when the broker answers (and `missing`, the client package the
 * transport needs when it is not installed, is undefined); otherwise a skip
 * saying why, or, when the broker is required, a failing test.
 */
export function describeIfBroker(
  broker: Broker,
  missing?: string,
): (name: string, body: () => void) => void {
  const probe = probeSync(broker.url);
  if (probe.available && !missing) return describe;
  const message = missing
    ? `Nest's ${broker.label} transport needs ${missing}, which is not installed`
    : `${broker.label} at ${broker.url} is unreachable (${(probe as { reason: string }).reason})`;
  if (process.env[broker.requireVariable] === '1') {
    return (name) =>
      describe(name, () => {
        it(`needs ${broker.label} (${broker.requireVariable}=1)`, () => {
          throw new Error(missing ? message : `${message}; ${broker.hint}`);
        });
      });
  }
  console.warn(
    `\n[tests] ${broker.label} suite skipped: ${missing ? message : `${message}; ${broker.hint}`}.`,
  );
  return describe.runIf(false);
}
