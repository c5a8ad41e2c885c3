import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/**
 * Every ```ts block of the README compiles as pasted into the project `nest
 * new` makes, against the built package as an application installs it (its
 * `exports` map and declarations, not the sources): once as an ES-module
 * project (Nest 12: `"type": "module"`, `nodenext`) and once as a CommonJS one
 * (Nest 11: no `"type"`, `nodenext`). Whichever stack is installed here gives
 * the Nest and TypeORM types; CI runs this on both. A block whose first line is
 * `// src/name.ts` is written under that name, so the quick start's files
 * import each other.
 */
const ROOT = path.resolve(__dirname, '../..');

function samples(): { name: string; code: string }[] {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  return blocks.map((code, i) => {
    const named = /^\/\/ (src\/[\w./-]+\.ts)\b/.exec(code);
    return { name: named ? named[1] : `src/sample-${i + 1}.ts`, code };
  });
}

function typeCheck(kind: 'module' | 'commonjs'): string[] {
  // Inside the repository, so `nest-idempotency` resolves to node_modules (the built package).
  const dir = fs.mkdtempSync(path.join(ROOT, '.readme-samples-'));
  try {
    fs.writeFileSync(
      path.join(dir, 'package.json'),
      JSON.stringify({ name: `readme-${kind}`, private: true, type: kind }),
    );
    const files = samples().map(({ name, code }) => {
      const file = path.join(dir, name);
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, code);
      return file;
    });
    const options: ts.CompilerOptions = {
      target: ts.ScriptTarget.ES2023,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
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
      .filter((d) => d.file === undefined || files.includes(path.resolve(d.file.fileName)))
      .map((d) => {
        const where = d.file
          ? `${path.relative(dir, d.file.fileName)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}`
          : '';
        return `${kind}: ${where} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
      });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

describe('README code samples', () => {
  beforeAll(() => {
    // The declarations an application sees are the build's (the ES-module build's for the
    // `module` project, the CommonJS build's for the other): make both current.
    execFileSync(process.execPath, [path.join(ROOT, 'tools/build.mjs')]);
  }, 240_000);

  it('has the quick start in it', () => {
    const names = samples().map((s) => s.name);
    for (const name of [
      'src/app.module.ts',
      'src/payments.controller.ts',
      'src/payments.service.ts',
      'src/create-payment.dto.ts',
      'src/data-source.ts',
    ]) {
      expect(names).toContain(name);
    }
  });

  it.each(['module', 'commonjs'] as const)(
    'compile in a %s project with nodenext resolution, against the built package',
    (kind) => {
      expect(typeCheck(kind)).toEqual([]);
    },
    60_000,
  );
});
