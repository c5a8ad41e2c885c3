import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

/**
 * The package's two builds in one Node process, as an application meets them:
 * `import` gets the ES-module build, `require` the CommonJS entry points
 * (require/*.js), which hand back the ES-module build once it is loaded.
 * Built fresh into a scratch copy of the package inside the repository (so its
 * peers resolve from node_modules); each case runs in its own Node process.
 */
const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '../..');
const PACKAGE = path.join(ROOT, 'libs/idempotency');
const ENTRIES = ['', '/core', '/typeorm', '/testing', '/opentelemetry', '/redis'];
const ERRORS = [
  'IdempotencyError',
  'IdempotencyConfigError',
  'IdempotencyKeyError',
  'IdempotencyPayloadError',
  'IdempotencyLeaseLostError',
  'IdempotencyStoreUnavailableError',
  'IdempotencyStoreSchemaError',
  'IdempotencyCompletionError',
  'IdempotencyFingerprintMismatchError',
  'IdempotencyInFlightError',
  'IdempotencyOutcomeUnknownError',
  'IdempotencyNotExecutedError',
  'IdempotencyHttpException',
];
let app: string;

/** Runs `source` as an ES module in the scratch application; returns its JSON and warnings. */
async function inProcess(
  source: string,
  nodeOptions: string[] = [],
): Promise<{ result: Record<string, unknown>; warnings: string }> {
  const file = path.join(app, `case-${Math.random().toString(36).slice(2)}.mjs`);
  fs.writeFileSync(file, `import 'reflect-metadata';\n${source}`);
  const { stdout, stderr } = await run(process.execPath, [...nodeOptions, file], { cwd: app });
  return { result: JSON.parse(stdout) as Record<string, unknown>, warnings: stderr };
}

/** Every error class, made from one copy, against `instanceof` of the other; plus the tokens. */
const AGREEMENT = `
const errors = ${JSON.stringify(ERRORS)}.filter((name) => name in lib);
const sample = (lib, name) => {
  switch (name) {
    case 'IdempotencyStoreUnavailableError': return new lib[name]('m', 1000);
    case 'IdempotencyCompletionError': return new lib[name]('m', 's', 'd');
    case 'IdempotencyFingerprintMismatchError': return new lib[name]('s', 'd');
    case 'IdempotencyInFlightError': return new lib[name](1000, 's', 'd');
    case 'IdempotencyOutcomeUnknownError': return new lib[name]('s', 'd', new Date(), 'lease-expired');
    case 'IdempotencyHttpException': return new lib[name]({ type: 'about:blank', title: 't', status: 409, detail: 'd', code: 'c' });
    default: return new lib[name]('m');
  }
};
const agreement = (a, b) => ({
  tokens: [
    a.IdempotencyStore === b.IdempotencyStore,
    a.IDEMPOTENCY_MODULE_OPTIONS === b.IDEMPOTENCY_MODULE_OPTIONS,
    a.IdempotentMetadata?.KEY === b.IdempotentMetadata?.KEY,
  ],
  sameErrorAcross: errors.filter((n) => !(sample(a, n) instanceof b[n] && sample(b, n) instanceof a[n])),
  baseAcross: errors.filter((n) => n !== 'IdempotencyNotExecutedError' && n !== 'IdempotencyHttpException' && !(sample(a, n) instanceof b.IdempotencyError)),
  falseMatches: errors.filter((n) => n !== 'IdempotencyConfigError' && sample(a, n) instanceof b.IdempotencyConfigError),
});
`;

beforeAll(async () => {
  app = fs.mkdtempSync(path.join(ROOT, '.dual-build-'));
  const target = path.join(app, 'node_modules/nest-idempotency');
  fs.mkdirSync(target, { recursive: true });
  fs.copyFileSync(path.join(PACKAGE, 'package.json'), path.join(target, 'package.json'));
  fs.cpSync(path.join(PACKAGE, 'require'), path.join(target, 'require'), { recursive: true });
  await run(process.execPath, [
    path.join(ROOT, 'tools/build.mjs'),
    '--out-dir',
    path.join(target, 'dist'),
  ]);
}, 240_000);

afterAll(() => {
  if (app) fs.rmSync(app, { recursive: true, force: true });
});

describe('the ES-module and CommonJS builds in one process', () => {
  it('loads every entry point both ways', async () => {
    const { result } = await inProcess(`
import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const out = {};
for (const entry of ${JSON.stringify(ENTRIES)}) {
  const name = 'nest-idempotency' + entry;
  out[name] = [Object.keys(await import(name)).length, Object.keys(require(name)).length];
}
console.log(JSON.stringify(out));
`);
    for (const entry of ENTRIES) {
      const [imported, required] = result[`nest-idempotency${entry}`] as number[];
      expect(imported, entry).toBeGreaterThan(0);
      expect(required, entry).toBe(imported);
    }
  });

  it('imported first, a require() gets the same build: one copy of the classes, no warning', async () => {
    const { result, warnings } = await inProcess(`
import { createRequire } from 'node:module';
import * as imported from 'nest-idempotency';
import * as importedCore from 'nest-idempotency/core';
const required = createRequire(import.meta.url)('nest-idempotency');
const requiredTyped = createRequire(import.meta.url)('nest-idempotency/typeorm');
const importedTyped = await import('nest-idempotency/typeorm');
console.log(JSON.stringify({
  module: required.IdempotencyModule === imported.IdempotencyModule,
  engine: required.IdempotencyEngine === importedCore.IdempotencyEngine,
  store: requiredTyped.TypeOrmIdempotencyStore === importedTyped.TypeOrmIdempotencyStore,
  error: required.IdempotencyConfigError === imported.IdempotencyConfigError,
}));
`);
    expect(result).toEqual({ module: true, engine: true, store: true, error: true });
    expect(warnings).not.toContain('NEST_IDEMPOTENCY_TWO_BUILDS');
  });

  it('required first, then imported: two copies that agree on tokens and errors, and a warning', async () => {
    const { result, warnings } = await inProcess(`
import { createRequire } from 'node:module';
const required = createRequire(import.meta.url)('nest-idempotency');
const imported = await import('nest-idempotency');
const lib = imported;
${AGREEMENT}
console.log(JSON.stringify({ copies: required.IdempotencyModule === imported.IdempotencyModule ? 1 : 2, ...agreement(required, imported) }));
`);
    expect(result).toEqual({
      copies: 2,
      tokens: [true, true, true],
      sameErrorAcross: [],
      baseAcross: [],
      falseMatches: [],
    });
    expect(warnings.match(/NEST_IDEMPOTENCY_TWO_BUILDS/g)).toHaveLength(1);
  });

  it("a handler's @IdempotencyCtx() from one copy gets its context from the other copy's module", async () => {
    const { result } = await inProcess(`
import { createRequire } from 'node:module';
import { Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
const required = createRequire(import.meta.url)('nest-idempotency');
const imported = await import('nest-idempotency');
const { InMemoryIdempotencyStore } = await import('nest-idempotency/core');
class Charges {
  charge(ctx) {
    return { context: ctx === undefined ? 'none' : typeof ctx.locator };
  }
}
// As \`@Post('charge') @Idempotent() charge(@IdempotencyCtx() ctx)\` would, with the parameter from the other copy.
required.IdempotencyCtx()(Charges.prototype, 'charge', 0);
let method = Object.getOwnPropertyDescriptor(Charges.prototype, 'charge');
for (const decorate of [imported.Idempotent(), Post('charge')])
  method = decorate(Charges.prototype, 'charge', method) ?? method;
Object.defineProperty(Charges.prototype, 'charge', method);
Controller('c')(Charges);
class App {}
Module({
  imports: [imported.IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore() })],
  controllers: [Charges],
})(App);
const app = await NestFactory.create(App, { logger: false });
await app.listen(0, '127.0.0.1');
const response = await fetch(await app.getUrl() + '/c/charge', {
  method: 'POST',
  headers: { 'idempotency-key': 'dual-build-ctx' },
});
const body = await response.json();
await app.close();
console.log(JSON.stringify({ copies: required.IdempotencyModule === imported.IdempotencyModule ? 1 : 2, status: response.status, ...body }));
`);
    expect(result).toEqual({ copies: 2, status: 201, context: 'function' });
  });

  it('where require() cannot load an ES module (as under Jest), the engine falls back to the CommonJS build, which agrees', async () => {
    const { result, warnings } = await inProcess(
      `
import { createRequire } from 'node:module';
const imported = await import('nest-idempotency/core');
const required = createRequire(import.meta.url)('nest-idempotency/core');
const lib = imported;
${AGREEMENT}
console.log(JSON.stringify({ copies: required.IdempotencyEngine === imported.IdempotencyEngine ? 1 : 2, ...agreement(imported, required) }));
`,
      // Without require(esm), the CommonJS build cannot load Nest 12 either: the engine only.
      ['--no-experimental-require-module'],
    );
    expect(result).toMatchObject({
      copies: 2,
      sameErrorAcross: [],
      baseAcross: [],
      falseMatches: [],
    });
    // The store token; the other two are the Nest layer's, not in this entry point.
    expect((result.tokens as boolean[])[0]).toBe(true);
    expect(warnings).toContain('NEST_IDEMPOTENCY_TWO_BUILDS');
  });
});
