// The ES-module build's module-format.ts (see there for what each export is):
// tools/build.mjs puts this file in its place in dist/esm.
import { createRequire } from 'node:module';

export const MODULE_FORMAT = 'module';

const require = createRequire(import.meta.url);

export function requirePackage(name) {
  return require(name);
}

// `require` where it can load the package, so a CommonJS package is the copy
// the application's own `import` gets; `import()` for an ES module that
// `require` cannot load: Jest's ES-module runtime before Node 24.9 throws
// ERR_REQUIRE_ESM for Nest 12's @nestjs/microservices or @nestjs/swagger.
export async function importPackage(name) {
  try {
    return require(name);
  } catch (error) {
    if (error?.code !== 'ERR_REQUIRE_ESM') throw error;
    return import(name);
  }
}
