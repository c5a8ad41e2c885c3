import { MODULE_FORMAT } from './module-format';

/**
 * Which builds of the package this process has loaded, in a global every
 * copy finds. The package's CommonJS entry points (require/*.js) read it:
 * once the ES-module build is loaded, `require('nest-idempotency')` returns
 * that build, so an application that imports the package and also requires
 * it holds one copy of its classes and tokens.
 */
const LOADED_BUILDS = Symbol.for('nest-idempotency.loaded-builds');

type LoadedBuilds = { commonjs?: true; module?: true; warned?: true };

const loaded = ((globalThis as Record<symbol, unknown>)[LOADED_BUILDS] ??= {}) as LoadedBuilds;
loaded[MODULE_FORMAT] = true;
if (loaded.commonjs && loaded.module && !loaded.warned) {
  loaded.warned = true;
  process.emitWarning(
    "nest-idempotency is loaded twice in this process, as its CommonJS build and as its ES-module build: the package was required before it was imported, or where require() cannot load an ES module (Jest). Injection tokens, metadata and errors agree between the two copies, but a class from one (IdempotencyModule, IdempotencyEngine) is not the same class as the other's; import the package before anything requires it",
    { code: 'NEST_IDEMPOTENCY_TWO_BUILDS' },
  );
}
