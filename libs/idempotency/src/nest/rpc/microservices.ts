import { IdempotencyConfigError } from '../../core/errors';

type Microservices = typeof import('@nestjs/microservices');

let loaded: Microservices | undefined;

/**
 * `@nestjs/microservices`, loaded the first time a message handler needs it,
 * so an HTTP-only application runs without the package installed.
 */
export function microservices(): Microservices {
  if (!loaded) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      loaded = require('@nestjs/microservices') as Microservices;
    } catch (error) {
      throw new IdempotencyConfigError(
        `@Idempotent message handlers need @nestjs/microservices, which could not be loaded: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }
  return loaded;
}
