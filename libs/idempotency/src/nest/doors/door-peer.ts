import { IdempotencyConfigError } from '../../core/errors';
import { optionalPeer, preloadOptionalPeer, type OptionalPeer } from '../../core/optional-peer';

/**
 * An optional peer package a door needs (`@nestjs/microservices`,
 * `@nestjs/websockets`, `graphql`): loaded at bootstrap (`load`, with
 * `import()` where `require` cannot: Nest 12's packages are ES modules) only
 * by an application that has such handlers, so the others run without it;
 * a missing package fails the bootstrap, naming what needed it.
 */
export class DoorPeer<T> {
  private loaded: T | undefined = undefined;

  constructor(
    private readonly name: OptionalPeer,
    /** The start of the error when it is missing, naming what needs it (the cause's message follows). */
    private readonly unavailable: string,
  ) {}

  /** The package, loaded when first asked (after `load`, at once). */
  get(): T {
    if (!this.loaded) {
      try {
        this.loaded = optionalPeer<T>(this.name);
      } catch (error) {
        throw new IdempotencyConfigError(`${this.unavailable}${(error as Error).message}`, {
          cause: error,
        });
      }
    }
    return this.loaded;
  }

  async load(): Promise<void> {
    await preloadOptionalPeer(this.name);
    this.get();
  }
}
