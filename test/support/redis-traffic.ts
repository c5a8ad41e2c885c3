import { randomUUID } from 'node:crypto';
import { createClient, RedisClientType } from 'redis';

/**
 * What a Redis server actually executed, seen through MONITOR on a
 * connection of its own: every command, by the address of the connection
 * that sent it (`lua` for the commands a script ran). A marker (`ECHO`) sent
 * after the code under test bounds each reading: MONITOR reports commands
 * in the order the server ran them, so whatever the code sent came first.
 */
export interface ExecutedCommand {
  /** `127.0.0.1:port` of the sending connection, or `lua`. */
  from: string;
  /** Upper-case command name, then its arguments as MONITOR quotes them. */
  name: string;
  args: string[];
}

export class MonitorSpy {
  private lines: string[] = [];
  private readonly arrived = new Set<() => void>();

  private constructor(
    private readonly monitor: RedisClientType,
    private readonly admin: RedisClientType,
  ) {}

  static async start(url: string): Promise<MonitorSpy> {
    const monitor: RedisClientType = createClient({ url });
    const admin: RedisClientType = createClient({ url });
    monitor.on('error', () => undefined);
    admin.on('error', () => undefined);
    await Promise.all([monitor.connect(), admin.connect()]);
    const spy = new MonitorSpy(monitor, admin);
    await monitor.monitor((line) => {
      spy.lines.push(String(line));
      for (const wake of spy.arrived) wake();
    });
    return spy;
  }

  /** Commands the server ran since the previous call, up to a marker sent now. */
  async since(): Promise<ExecutedCommand[]> {
    const marker = `marker-${randomUUID()}`;
    const seen = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the MONITOR marker never came')), 5000);
      const check = () => {
        if (!this.lines.some((line) => line.includes(marker))) return;
        clearTimeout(timer);
        this.arrived.delete(check);
        resolve();
      };
      this.arrived.add(check);
      check();
    });
    await this.admin.echo(marker);
    await seen;
    const upTo = this.lines.findIndex((line) => line.includes(marker));
    const before = this.lines.splice(0, upTo + 1).slice(0, -1);
    return before.map(parse).filter((c): c is ExecutedCommand => c !== undefined);
  }

  async stop(): Promise<void> {
    this.monitor.destroy();
    this.admin.destroy();
  }
}

/** `1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "abc" "1" …` */
function parse(line: string): ExecutedCommand | undefined {
  const match = /^\S+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
  if (!match) return undefined;
  const args = [...match[2].matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]);
  if (args.length === 0) return undefined;
  return { from: match[1], name: args[0].toUpperCase(), args: args.slice(1) };
}

/** The address (`ip:port`) the server sees for `client`'s connection. */
export async function addressOf(client: {
  sendCommand(args: string[]): Promise<unknown>;
}): Promise<string> {
  const info = String(await client.sendCommand(['CLIENT', 'INFO']));
  const addr = /(?:^|\s)addr=(\S+)/.exec(info)?.[1];
  if (!addr) throw new Error(`no addr in CLIENT INFO: ${info}`);
  return addr;
}
