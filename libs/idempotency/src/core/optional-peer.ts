import { importPackage, requirePackage } from './module-format';

/** The optional peers the library loads only when a feature of the application needs them. */
export type OptionalPeer =
  | '@nestjs/microservices'
  | '@nestjs/swagger'
  | '@nestjs/websockets'
  | '@nestjs-cls/transactional'
  | '@opentelemetry/api'
  | 'bullmq'
  | 'class-transformer'
  | 'cron'
  | 'drizzle-orm'
  | 'graphql'
  | 'kysely'
  | 'redis';

type Preloaded = { loaded: true; module: unknown } | { loaded: false; error: unknown };

const preloaded = new Map<OptionalPeer, Preloaded>();

/**
 * Loads an optional peer ahead of its synchronous use, at bootstrap, once the
 * application is known to need it. Only this way can the ES-module build load
 * an ES-module-only peer (Nest 12's `@nestjs/microservices`) under Jest's
 * ES-module runtime. Never rejects: a failure is kept, and `optionalPeer`
 * throws it.
 */
export async function preloadOptionalPeer(name: OptionalPeer): Promise<void> {
  if (preloaded.get(name)?.loaded) return;
  try {
    preloaded.set(name, { loaded: true, module: await importPackage(name) });
  } catch (error) {
    preloaded.set(name, { loaded: false, error });
  }
}

/**
 * The peer: as `preloadOptionalPeer` loaded it, else loaded now with
 * `require`. Throws when it cannot be loaded (not installed, most often).
 */
export function optionalPeer<T>(name: OptionalPeer): T {
  const outcome = preloaded.get(name);
  if (outcome?.loaded) return outcome.module as T;
  if (outcome) throw outcome.error;
  return requirePackage(name) as T;
}
