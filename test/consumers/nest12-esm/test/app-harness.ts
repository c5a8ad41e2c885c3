import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { ClientProxyFactory, Transport } from '@nestjs/microservices';
import { createServer, type AddressInfo } from 'node:net';
import { firstValueFrom } from 'rxjs';
import { AppModule } from '../src/app.module.js';

/** The application, started as `main.ts` would start it, for either test runner. */
export interface RunningApp {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** A request over the TCP transport, answered by a @MessagePattern handler. */
  send(pattern: string, data: unknown): Promise<unknown>;
  close(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** HTTP on a free port, and a hybrid TCP microservice: real sockets for both. */
export async function startApp(): Promise<RunningApp> {
  const app = await NestFactory.create(AppModule, { logger: false });
  const port = await freePort();
  app.connectMicroservice({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
  await app.startAllMicroservices();
  await app.listen(0, '127.0.0.1');
  const client = ClientProxyFactory.create({
    transport: Transport.TCP,
    options: { host: '127.0.0.1', port },
  });
  await client.connect();
  return {
    url: `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`,
    send: (pattern, data) => firstValueFrom(client.send(pattern, data)),
    close: async () => {
      await client.close();
      await app.close();
    },
  };
}
