import { IdempotencyConfigError } from '../../../core/errors';
import { optionalPeer, preloadOptionalPeer } from '../../../core/optional-peer';

type Websockets = typeof import('@nestjs/websockets');

let loaded: Websockets | undefined;

/**
 * `@nestjs/websockets` (whose `WsException` the refusals extend), loaded at
 * bootstrap only when an application has `@Idempotent` gateway handlers.
 */
export function websockets(): Websockets {
  if (!loaded) {
    try {
      loaded = optionalPeer<Websockets>('@nestjs/websockets');
    } catch (error) {
      throw new IdempotencyConfigError(
        `@Idempotent gateway handlers need @nestjs/websockets, which could not be loaded: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }
  return loaded;
}

/** Loads `@nestjs/websockets` at bootstrap (an ES module on Nest 12); a missing package fails the bootstrap. */
export async function loadWebsockets(): Promise<void> {
  await preloadOptionalPeer('@nestjs/websockets');
  websockets();
}
