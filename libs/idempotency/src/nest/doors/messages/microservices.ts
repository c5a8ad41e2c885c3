import { IdempotencyConfigError } from '../../../core/errors';
import { optionalPeer, preloadOptionalPeer } from '../../../core/optional-peer';

type Microservices = typeof import('@nestjs/microservices');

let loaded: Microservices | undefined;

/**
 * `@nestjs/microservices`, loaded at bootstrap when the application has
 * message handlers (`loadMicroservices`), so an HTTP-only application runs
 * without the package installed.
 */
export function microservices(): Microservices {
  if (!loaded) {
    try {
      loaded = optionalPeer<Microservices>('@nestjs/microservices');
    } catch (error) {
      throw new IdempotencyConfigError(
        `@Idempotent message handlers need @nestjs/microservices, which could not be loaded: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }
  return loaded;
}

/**
 * Loads `@nestjs/microservices` at bootstrap, where `import()` can (Nest 12's
 * is an ES module, which Jest's ES-module runtime cannot `require`); a missing
 * package fails the bootstrap.
 */
export async function loadMicroservices(): Promise<void> {
  await preloadOptionalPeer('@nestjs/microservices');
  microservices();
}
