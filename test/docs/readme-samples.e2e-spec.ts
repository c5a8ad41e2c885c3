import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/**
 * Every ```ts block of the README is type-checked against the library's
 * sources, so a sample cannot drift from the code. A block whose first line
 * is `// name.ts` is written under that name, so the quick start's files can
 * import each other; identifiers a sample only alludes to (your service, your
 * DTO) are declared in readme-prelude.d.ts.
 */
const ROOT = path.resolve(__dirname, '../..');

function samples(): { name: string; code: string }[] {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  return blocks.map((code, i) => {
    const named = /^\/\/ ([\w.-]+\.ts)\b/.exec(code);
    return { name: named ? named[1] : `sample-${i + 1}.ts`, code };
  });
}

describe('README code samples', () => {
  it('has samples to check', () => {
    expect(samples().length).toBeGreaterThanOrEqual(10);
  });

  it('type-check against the library', () => {
    const dir = fs.mkdtempSync(path.join(ROOT, '.readme-samples-'));
    try {
      const files = samples().map(({ name, code }) => {
        const file = path.join(dir, name);
        // `export {}` makes every block a module, so top-level await and local names are allowed.
        fs.writeFileSync(file, `${code}\nexport {};\n`);
        return file;
      });
      const options: ts.CompilerOptions = {
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ES2022,
        moduleResolution: ts.ModuleResolutionKind.Bundler,
        strict: true,
        noEmit: true,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        esModuleInterop: true,
        skipLibCheck: true,
        types: ['node'],
        paths: {
          'nest-idempotency': [path.join(ROOT, 'libs/idempotency/src')],
          'nest-idempotency/testing': [path.join(ROOT, 'libs/idempotency/src/testing')],
        },
      };
      const program = ts.createProgram(
        [...files, path.join(__dirname, 'readme-prelude.d.ts')],
        options,
      );
      const problems = ts
        .getPreEmitDiagnostics(program)
        .filter((d) => d.file === undefined || files.includes(path.resolve(d.file.fileName)))
        .map((d) => {
          const where = d.file
            ? `${path.basename(d.file.fileName)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}`
            : '';
          return `${where} ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
        });
      expect(problems).toEqual([]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
