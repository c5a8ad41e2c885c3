#!/usr/bin/env node
// Builds libs/idempotency/dist: the CommonJS build (dist/, as tsconfig.lib.json
// says) and the ES-module build (dist/esm/), both from the same sources with
// the same compiler and options, declarations and source maps (with the
// sources inlined) included. `npm run build` and prepack run it;
// `--out-dir <dir>` builds into another folder, `--clean` empties it first.
//
// The ES-module build differs in three ways. Relative imports are written as
// Node's ES-module loader needs them (`./core` becomes `./core.js`, a
// folder `./x` becomes `./x/index.js`), in the code and in the
// declarations. src/core/module-format.ts, the one file whose code differs
// between the formats, is replaced by src/core/module-format.esm.js. And
// dist/esm/package.json says `"type": "module"`.
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const ROOT = path.resolve(import.meta.dirname, '..');
const PACKAGE = path.join(ROOT, 'libs/idempotency');
const SRC = path.join(PACKAGE, 'src');
/** `--out-dir <dir>` builds elsewhere (tests do, to leave the package's dist/ alone). */
const outDirFlag = process.argv.indexOf('--out-dir');
const DIST =
  outDirFlag === -1 ? path.join(PACKAGE, 'dist') : path.resolve(process.argv[outDirFlag + 1]);
const ESM = path.join(DIST, 'esm');
/** The package's entry points: the ES-module build holds these and what they import, nothing else. */
const ENTRIES = [
  'index',
  'core',
  'store-kit',
  'typeorm',
  'pg',
  'mysql',
  'testing',
  'opentelemetry',
  'redis',
];

function readConfig() {
  const file = path.join(PACKAGE, 'tsconfig.lib.json');
  const parsed = ts.getParsedCommandLineOfConfigFile(
    file,
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => fail([d]),
    },
  );
  if (parsed.errors.length > 0) fail(parsed.errors);
  return parsed;
}

function fail(diagnostics) {
  const host = {
    getCanonicalFileName: (f) => f,
    getCurrentDirectory: () => ROOT,
    getNewLine: () => '\n',
  };
  process.stderr.write(ts.formatDiagnosticsWithColorAndContext(diagnostics, host));
  process.exit(1);
}

function emit(rootNames, options, transformers) {
  const program = ts.createProgram({ rootNames, options });
  const result = program.emit(undefined, undefined, undefined, false, transformers);
  const diagnostics = [...ts.getPreEmitDiagnostics(program), ...result.diagnostics];
  if (diagnostics.length > 0) fail(diagnostics);
}

/** `./core` from src/index.ts is `./core.js`; `./nest/index` stays `./nest/index.js`. */
function esmSpecifier(fromFile, specifier) {
  if (!specifier.startsWith('./') && !specifier.startsWith('../')) return specifier;
  const base = path.resolve(path.dirname(fromFile), specifier);
  if (specifier.endsWith('.js') && fs.existsSync(base.replace(/\.js$/, '.ts'))) return specifier;
  if (fs.existsSync(`${base}.ts`)) return `${specifier}.js`;
  if (fs.existsSync(path.join(base, 'index.ts'))) return `${specifier}/index.js`;
  throw new Error(`${path.relative(ROOT, fromFile)}: cannot resolve "${specifier}"`);
}

/** Rewrites every relative module specifier: imports, re-exports, `import()` and `import('…').T` types. */
function fullySpecified(context) {
  const { factory } = context;
  return (sourceFile) => {
    const rewrite = (literal) =>
      factory.createStringLiteral(esmSpecifier(sourceFile.fileName, literal.text));
    const visit = (node) => {
      if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
        return factory.updateImportDeclaration(
          node,
          node.modifiers,
          node.importClause,
          rewrite(node.moduleSpecifier),
          node.attributes,
        );
      }
      if (
        ts.isExportDeclaration(node) &&
        node.moduleSpecifier &&
        ts.isStringLiteral(node.moduleSpecifier)
      ) {
        return factory.updateExportDeclaration(
          node,
          node.modifiers,
          node.isTypeOnly,
          node.exportClause,
          rewrite(node.moduleSpecifier),
          node.attributes,
        );
      }
      if (
        ts.isCallExpression(node) &&
        node.expression.kind === ts.SyntaxKind.ImportKeyword &&
        node.arguments.length === 1 &&
        ts.isStringLiteral(node.arguments[0])
      ) {
        return factory.updateCallExpression(node, node.expression, node.typeArguments, [
          rewrite(node.arguments[0]),
        ]);
      }
      if (
        ts.isImportTypeNode(node) &&
        ts.isLiteralTypeNode(node.argument) &&
        ts.isStringLiteral(node.argument.literal)
      ) {
        return factory.updateImportTypeNode(
          node,
          factory.updateLiteralTypeNode(node.argument, rewrite(node.argument.literal)),
          node.attributes,
          ts.visitNode(node.qualifier, visit),
          ts.visitNodes(node.typeArguments, visit),
          node.isTypeOf,
        );
      }
      return ts.visitEachChild(node, visit, context);
    };
    return ts.visitNode(sourceFile, visit);
  };
}

const started = Date.now();
const config = readConfig();
// Only when asked (prepack): a test may be running the CLI from dist/ meanwhile.
if (process.argv.includes('--clean')) fs.rmSync(DIST, { recursive: true, force: true });

// CommonJS: tsconfig.lib.json as it is (module node20; the package has no "type").
emit(config.fileNames, { ...config.options, outDir: DIST });

// ES modules: the entry points and what they reach.
emit(
  ENTRIES.map((entry) => path.join(SRC, `${entry}.ts`)),
  {
    ...config.options,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    outDir: ESM,
  },
  { after: [fullySpecified], afterDeclarations: [fullySpecified] },
);
const format = path.join(ESM, 'core/module-format.js');
fs.copyFileSync(path.join(SRC, 'core/module-format.esm.js'), format);
fs.rmSync(`${format}.map`, { force: true });
fs.writeFileSync(path.join(ESM, 'package.json'), `${JSON.stringify({ type: 'module' })}\n`);

// On stderr: `npm pack --json` prints its JSON on stdout, after what prepack prints.
process.stderr.write(
  `built ${path.relative(ROOT, DIST)} (CommonJS) and ${path.relative(ROOT, ESM)} (ES modules) in ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
);
