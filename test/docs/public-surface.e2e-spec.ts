import path from 'node:path';
import ts from 'typescript';

/**
 * Every name each entry point of the package exports, values and types, as a
 * file per entry point under __surface__/. A change to the public surface is
 * then a diff of those files in review (update them with `vitest -u`), never
 * a side effect of a helper's `export`.
 */
const SRC = path.resolve(__dirname, '../../libs/idempotency/src');
const ENTRIES = [
  'index',
  'core',
  'store-kit',
  'typeorm',
  'pg',
  'mysql',
  'redis',
  'testing',
  'opentelemetry',
];

function surfaces(): Map<string, string> {
  const files = ENTRIES.map((entry) => path.join(SRC, `${entry}.ts`));
  const program = ts.createProgram(files, {
    target: ts.ScriptTarget.ES2023,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    experimentalDecorators: true,
    emitDecoratorMetadata: true,
    skipLibCheck: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const out = new Map<string, string>();
  for (const [i, file] of files.entries()) {
    const module = checker.getSymbolAtLocation(program.getSourceFile(file)!)!;
    const lines = checker.getExportsOfModule(module).map((exported) => {
      const target =
        exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
      const kind =
        target.flags & ts.SymbolFlags.Class
          ? 'class'
          : target.flags & ts.SymbolFlags.Function
            ? 'function'
            : target.flags & ts.SymbolFlags.Value
              ? 'const'
              : 'type';
      const deprecated = (exported.declarations ?? []).some((declaration) =>
        ts
          .getJSDocTags(declaration.parent?.parent ?? declaration)
          .some((tag) => tag.tagName.text === 'deprecated'),
      );
      return `${kind} ${exported.name}${deprecated ? ' (deprecated)' : ''}`;
    });
    out.set(
      ENTRIES[i],
      `${lines.sort((a, b) => a.split(' ')[1].localeCompare(b.split(' ')[1])).join('\n')}\n`,
    );
  }
  return out;
}

describe('the public surface', () => {
  const all = surfaces();

  it.each(ENTRIES)('nest-idempotency%s exports what __surface__ lists', async (entry) => {
    await expect(all.get(entry)).toMatchFileSnapshot(`__surface__/${entry}.txt`);
  });

  it('keeps internals out of every entry point', () => {
    const internal = [
      'hasControlCharacters',
      'scopeProblem',
      'DURATION_RULES',
      'MAX_TIMER_MS',
      'compilePolicy',
    ];
    for (const [entry, surface] of all) {
      for (const name of internal) expect(surface, entry).not.toMatch(new RegExp(` ${name}\\b`));
    }
  });

  it("gives the store author's toolbox an entry point of its own", () => {
    const kit = all.get('store-kit')!;
    for (const name of [
      'decide',
      'waitForRecord',
      'WaiterRegistry',
      'isStealable',
      'isPurgeable',
      'fingerprintsConflict',
    ])
      expect(kit).toMatch(new RegExp(` ${name}\\n`));
  });
});
