import net from 'node:net';

/**
 * A TCP forwarder in front of a real database server, so a test can cut the
 * database off (every socket destroyed, new ones refused) and bring it back.
 */
export class TcpProxy {
  private server?: net.Server;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(port = 0): Promise<number> {
    this.server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, this.targetHost);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => s.destroy());
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server!.address() as net.AddressInfo).port;
    return this.port;
  }

  /** Refuses new connections and drops the open ones. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  async restore(): Promise<void> {
    await this.start(this.port);
  }
}

export function parsePgUrl(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  return { host: parsed.hostname || '127.0.0.1', port: Number(parsed.port || 5432) };
}

/**
 * A forwarder in front of the server that can go silent: connections stay
 * open and new ones are accepted, but nothing gets through in either
 * direction, as in a network partition. `cut()` then drops every socket.
 */
export class SilentForwarder {
  private server?: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private silent = false;
  port = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  async start(): Promise<void> {
    this.server = net.createServer((client) => {
      this.track(client);
      if (this.silent) return; // accepted, never answered
      const upstream = net.connect(this.target.port, this.target.host);
      this.track(upstream);
      client.on('data', (chunk) => void (this.silent || upstream.write(chunk)));
      upstream.on('data', (chunk) => void (this.silent || client.write(chunk)));
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  goSilent(): void {
    this.silent = true;
  }

  async cut(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private track(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.sockets.delete(socket));
  }
}
