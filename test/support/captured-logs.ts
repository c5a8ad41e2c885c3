import { INestApplication, LoggerService, ModuleMetadata } from '@nestjs/common';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { AddressInfo } from 'node:net';
import type { IdempotencyLogger } from 'nest-idempotency';
import type { AdapterName } from './http-app';

/**
 * Collects every line logged by Nest (the interceptor's and engine's `Logger`)
 * and by a store given `logs.store`, so a test can check that no raw key leaks.
 */
export class CapturedLogs implements LoggerService {
  readonly lines: string[] = [];

  log(message: unknown, ...rest: unknown[]): void {
    this.push('log', message, rest);
  }
  error(message: unknown, ...rest: unknown[]): void {
    this.push('error', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]): void {
    this.push('warn', message, rest);
  }
  debug(message: unknown, ...rest: unknown[]): void {
    this.push('debug', message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]): void {
    this.push('verbose', message, rest);
  }

  /** An `IdempotencyLogger` (for a store) writing into the same list. */
  readonly store: IdempotencyLogger = {
    warn: (m) => this.push('store:warn', m, []),
    error: (m) => this.push('store:error', m, []),
    debug: (m) => this.push('store:debug', m, []),
  };

  text(): string {
    return this.lines.join('\n');
  }

  private push(level: string, message: unknown, rest: unknown[]): void {
    const parts = [message, ...rest].map((p) =>
      p instanceof Error
        ? `${p.name}: ${p.message}\n${p.stack ?? ''}`
        : typeof p === 'string'
          ? p
          : JSON.stringify(p),
    );
    this.lines.push(`[${level}] ${parts.join(' ')}`);
  }
}

/** Like `startHttpApp`, but Nest logs every level into `logs` instead of staying silent. */
export async function startLoggedHttpApp(
  adapter: AdapterName,
  metadata: ModuleMetadata,
  logs: CapturedLogs,
): Promise<{ app: INestApplication; url: string }> {
  const moduleRef = await Test.createTestingModule(metadata).setLogger(logs).compile();
  const app =
    adapter === 'fastify'
      ? moduleRef.createNestApplication(new FastifyAdapter(), { logger: logs })
      : moduleRef.createNestApplication({ logger: logs });
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as AddressInfo;
  return { app, url: `http://127.0.0.1:${address.port}` };
}
