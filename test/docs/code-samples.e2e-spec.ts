import { execFileSync } from 'node:child_process';
import { builtinModules } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/**
 * Every ```ts (or ```typescript) block of the README and of every page of
 * docs/ compiles as pasted into the project `nest new` makes, against the
 * built package as an application installs it (its `exports` map and
 * declarations, not the sources): once as an ES-module project (Nest 12:
 * `"type": "module"`, `nodenext`) and once as a CommonJS one (Nest 11: no
 * `"type"`, `nodenext`), TypeScript strict. Whichever stack is installed here
 * gives the Nest and TypeORM types; CI runs this on both.
 *
 * Each sample is a module of its own (one program for all of them, per
 * project kind). A block whose first line is `// src/name.ts` is written under
 * that name, in a folder of its page, so the samples of one page can import
 * each other (the README's quick start does).
 *
 * A block that is deliberately not a whole file opts out with an HTML comment
 * on the line just above its fence, giving the reason:
 *
 *   <!-- sample: not compiled (the reason) -->
 *
 * Opt-outs are for what cannot be a file (an interface quoted for reading);
 * everything else imports and declares what it uses.
 *
 * Every package a sample imports must be one an application already has: one
 * that `nest new` installs, one of the library's declared peers, or one named
 * in an `npm install` line of the same page (or the README's installation
 * section). npm installs the required peers of what it installs; an optional
 * peer that the Express platform needs (Apollo's integration) must be named too.
 */
const ROOT = path.resolve(__dirname, '../..');
const OPT_OUT = /^<!--\s*sample:\s*not compiled\s*\((.*)\)\s*-->\s*$/;

interface Sample {
  page: string;
  line: number;
  name: string;
  code: string;
}

interface OptOut {
  page: string;
  line: number;
  reason: string;
}

/** README.md and every page of docs/, relative to the repository. */
function pages(): string[] {
  const docs = fs
    .readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`);
  return ['README.md', ...docs];
}

/** The folder a page's samples are written to in the scratch project. */
const folderOf = (page: string) => page.replace(/\.md$/, '').replace(/[^\w]+/g, '-');

/** The fenced ts/typescript blocks of one page, and the ones that opted out. */
function parse(page: string): { samples: Sample[]; optOuts: OptOut[] } {
  const lines = fs.readFileSync(path.join(ROOT, page), 'utf8').split('\n');
  const samples: Sample[] = [];
  const optOuts: OptOut[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*([\w-]*)/.exec(lines[i]);
    if (!open) continue;
    const [, indent, fence, language] = open;
    let end = i + 1;
    while (end < lines.length && !lines[end].trim().startsWith(fence)) end++;
    const body = lines
      .slice(i + 1, end)
      .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l))
      .join('\n');
    if (language === 'ts' || language === 'typescript') {
      const marker = i > 0 ? OPT_OUT.exec(lines[i - 1].trim()) : null;
      if (marker) {
        optOuts.push({ page, line: i + 1, reason: marker[1].trim() });
      } else {
        const named = /^\/\/ (src\/[\w./-]+\.ts)\b/.exec(body);
        samples.push({
          page,
          line: i + 1,
          name: `${folderOf(page)}/${named ? named[1] : `src/sample-line-${i + 1}.ts`}`,
          code: `${body}\n`,
        });
      }
    }
    i = end;
  }
  return { samples, optOuts };
}

const parsed = pages().map(parse);
const samples = parsed.flatMap((p) => p.samples);
const optOuts = parsed.flatMap((p) => p.optOuts);

function typeCheck(kind: 'module' | 'commonjs', only: Sample[] = samples): string[] {
  // Inside the repository, so `nest-idempotency` resolves to node_modules (the built package).
  const dir = fs.mkdtempSync(path.join(ROOT, '.code-samples-'));
  try {
    fs.writeFileSync(
      path.join(dir, 'package.json'),
      JSON.stringify({ name: `samples-${kind}`, private: true, type: kind }),
    );
    const where = new Map<string, Sample>();
    const files = only.map((sample) => {
      const file = path.join(dir, sample.name);
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, sample.code);
      where.set(file, sample);
      return file;
    });
    // What `nest new` writes in tsconfig.json, with strict on and nodenext resolution.
    const options: ts.CompilerOptions = {
      target: ts.ScriptTarget.ES2023,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      moduleDetection: ts.ModuleDetectionKind.Force,
      strict: true,
      noEmit: true,
      experimentalDecorators: true,
      emitDecoratorMetadata: true,
      esModuleInterop: true,
      skipLibCheck: true,
      types: ['node'],
    };
    const program = ts.createProgram(files, options);
    return ts
      .getPreEmitDiagnostics(program)
      .filter((d) => d.file === undefined || where.has(path.resolve(d.file.fileName)))
      .map((d) => {
        const sample = d.file ? where.get(path.resolve(d.file.fileName)) : undefined;
        const at = sample
          ? `${sample.page}:${sample.line + 1 + d.file!.getLineAndCharacterOfPosition(d.start ?? 0).line}`
          : '';
        return `${kind}: ${at} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
      });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The package a bare module specifier names (`@scope/name/sub` → `@scope/name`), or undefined. */
function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('node:')) {
    return undefined;
  }
  const parts = specifier.split('/');
  const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
  return builtinModules.includes(name) ? undefined : name;
}

/** The packages one sample imports (import and export declarations, `import()`, `import x = require()`). */
function importsOf(sample: Sample): string[] {
  const source = ts.createSourceFile(sample.name, sample.code, ts.ScriptTarget.Latest, false);
  const out = new Set<string>();
  const visit = (node: ts.Node): void => {
    let specifier: ts.Expression | undefined;
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) {
      specifier = node.moduleSpecifier;
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      specifier = node.arguments[0];
    } else if (ts.isExternalModuleReference(node)) {
      specifier = node.expression;
    }
    if (specifier && ts.isStringLiteral(specifier)) {
      const name = packageOf(specifier.text);
      if (name) out.add(name);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return [...out];
}

/** The packages the `npm install` (or `npm i`) lines of a page name, versions stripped. */
function installedBy(page: string): Set<string> {
  const text = fs.readFileSync(path.join(ROOT, page), 'utf8');
  const out = new Set<string>();
  for (const match of text.matchAll(/\bnpm (?:install|i|add)((?:[ \t]+[@\w-][\w@./^~<>=*-]*)+)/g)) {
    for (const word of match[1].trim().split(/\s+/)) {
      if (word.startsWith('-')) continue;
      // `name@range` or `@scope/name@range`: the version is after the last `@` but the first.
      const at = word.indexOf('@', 1);
      out.add(at === -1 ? word : word.slice(0, at));
    }
  }
  return out;
}

/**
 * What the application `nest new` makes depends on (the schematic's
 * package.json, Nest 11 and 12): the runtime dependencies and the ones a
 * sample could import from its tests.
 */
const NEST_NEW = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/platform-express',
  'reflect-metadata',
  'rxjs',
  '@nestjs/testing',
  'supertest',
];

/**
 * Packages an imported one needs on the Express platform `nest new` uses,
 * which its manifest leaves optional because another platform needs another.
 */
const EXPRESS_PEERS: Record<string, string[]> = {
  '@nestjs/apollo': ['@as-integrations/express5'],
};

const library = JSON.parse(
  fs.readFileSync(path.join(ROOT, 'libs/idempotency/package.json'), 'utf8'),
) as { name: string; peerDependencies: Record<string, string> };

interface Manifest {
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

/** An installed package's manifest, found as Node finds it from the repository. */
function manifestOf(name: string): Manifest | undefined {
  const file = path.join(ROOT, 'node_modules', name, 'package.json');
  return fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as Manifest) : undefined;
}

/** The packages a page's samples need but neither an application nor the page provides. */
function missingInstalls(page: string, pageSamples: Sample[]): string[] {
  const available = new Set([
    library.name,
    ...NEST_NEW,
    ...Object.keys(library.peerDependencies),
    ...installedBy('README.md'),
    ...installedBy(page),
  ]);
  const imported = new Set(pageSamples.flatMap(importsOf));
  const missing: string[] = [];
  for (const name of imported) {
    if (!available.has(name)) missing.push(`${page} imports ${name}`);
  }
  for (const name of imported) {
    // Optional in the manifest (so npm leaves it out), needed on Express all the same.
    for (const peer of EXPRESS_PEERS[name] ?? []) {
      expect(manifestOf(name)?.peerDependenciesMeta?.[peer], `${name} lists ${peer}`).toBeDefined();
      if (!available.has(peer)) missing.push(`${page} imports ${name}, which needs ${peer}`);
    }
  }
  return missing;
}

describe('code samples of the README and docs/', () => {
  beforeAll(() => {
    // The declarations an application sees are the build's (the ES-module build's for the
    // `module` project, the CommonJS build's for the other): make both current.
    execFileSync(process.execPath, [path.join(ROOT, 'tools/build.mjs')]);
  }, 240_000);

  it('has the quick start in it, and samples of every page that has ts blocks', () => {
    const names = samples.filter((s) => s.page === 'README.md').map((s) => s.name);
    for (const name of [
      'src/app.module.ts',
      'src/payments.controller.ts',
      'src/payments.service.ts',
      'src/create-payment.dto.ts',
      'src/data-source.ts',
    ]) {
      expect(names).toContain(`README/${name}`);
    }
    for (const page of pages()) {
      const fences = (
        fs.readFileSync(path.join(ROOT, page), 'utf8').match(/^\s*```(?:ts|typescript)\b/gm) ?? []
      ).length;
      const found =
        samples.filter((s) => s.page === page).length +
        optOuts.filter((o) => o.page === page).length;
      expect(found, page).toBe(fences);
    }
    expect(
      new Set(samples.map((s) => s.name)).size,
      'two samples of a page name the same file',
    ).toBe(samples.length);
  });

  it('opt out rarely, each saying why', () => {
    for (const optOut of optOuts) {
      expect(optOut.reason, `${optOut.page}:${optOut.line}`).toMatch(
        /[A-Za-z]{3,}.*\s.*[A-Za-z]{3,}/,
      );
    }
    expect(optOuts.length).toBeLessThan(samples.length / 10);
  });

  it('catch a sample that does not compile', () => {
    const broken: Sample = {
      page: 'broken.md',
      line: 1,
      name: 'broken/src/sample.ts',
      code: "import { Idempotent } from 'nest-idempotency';\nconst url: string = process.env.REDIS_URL;\nIdempotent({ nope: true });\n",
    };
    expect(typeCheck('module', [broken])).toHaveLength(2);
    expect(missingInstalls('README.md', [{ ...broken, code: "import 'left-pad';\n" }])).toEqual([
      'README.md imports left-pad',
    ]);
  });

  it.each(['module', 'commonjs'] as const)(
    'compile in a %s project with nodenext resolution, against the built package',
    (kind) => {
      expect(typeCheck(kind)).toEqual([]);
    },
    120_000,
  );

  it.each(pages())('%s names every package its samples import in its install line', (page) => {
    expect(
      missingInstalls(
        page,
        samples.filter((s) => s.page === page),
      ),
    ).toEqual([]);
  });
});
