'use strict';
// The package's `require` entry points (require/<entry>.js) load their build
// through this. Normally the CommonJS build (dist/). Once this process has
// loaded the ES-module build (dist/esm/: an application that imports the
// package), that build instead, through Node's require(esm), so that a
// CommonJS dependency or a createRequire() gets the very classes and tokens
// the application imported. Where require() cannot load an ES module (Jest's
// CommonJS runtime before Node 24.9 throws ERR_REQUIRE_ESM), the CommonJS
// build all the same.
const LOADED_BUILDS = Symbol.for('nest-idempotency.loaded-builds');

module.exports = function load(esModuleBuild, commonJsBuild) {
  if (globalThis[LOADED_BUILDS]?.module) {
    try {
      return esModuleBuild();
    } catch (error) {
      if (error?.code !== 'ERR_REQUIRE_ESM') throw error;
    }
  }
  return commonJsBuild();
};
