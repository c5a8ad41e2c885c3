import fs from 'node:fs';
import path from 'node:path';
import { Command } from 'commander';
import ts from 'typescript';
import {
  BUILT_IN_DEFAULTS,
  DEFAULT_MAX_PAYLOAD_BYTES,
  DEFAULT_MAX_WAITERS,
  IdempotencyEngine,
  InMemoryIdempotencyStore,
} from 'nest-idempotency/core';
import {
  IDEMPOTENCY_DURATION_BUCKETS_SECONDS,
  instrumentIdempotencyEngine,
  TracingIdempotencyStore,
} from 'nest-idempotency/opentelemetry';
import { ContractHarness, DEFAULT_SCALE, STORE_CONTRACT } from 'nest-idempotency/testing';
import * as bullmq from 'bullmq';
import * as idempotency from 'nest-idempotency';
import { ExitCode } from '../../libs/idempotency/src/cli/exit-codes';
import {
  GRPC_RETRY_AFTER_TRAILER,
  GRPC_STATUS,
  GRPC_STATUS_OF_REFUSAL,
} from '../../libs/idempotency/src/nest/doors/grpc/grpc-status';

/**
 * What the README and docs/ state about the code (counts, option tables, the
 * conformance kit's catalogue, the CLI's summary lines and exit codes, metric
 * names, refusal codes) is read from the code here, so the pages cannot drift
 * from it. Option names come from the exported TypeScript types, through the
 * type checker; counts and ids from the kit itself; metric names from the
 * instruments the library creates on a recording meter.
 */
const ROOT = path.resolve(__dirname, '../..');
const SRC = path.join(ROOT, 'libs/idempotency/src');

const read = (page: string) => fs.readFileSync(path.join(ROOT, page), 'utf8');
const pages = () => [
  'README.md',
  ...fs
    .readdirSync(path.join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The code spans of a Markdown fragment, in order. */
const codeSpans = (text: string) => [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]);

/**
 * The rows of the first table after the line that contains `anchor` (a
 * heading, or the paragraph above the table), each split into its cells.
 */
function tableAfter(page: string, anchor: string): string[][] {
  const lines = read(page).split('\n');
  const start = lines.findIndex((line) => line.includes(anchor));
  if (start === -1) throw new Error(`${page}: no line contains ${anchor}`);
  // The anchor may be the table's header row itself.
  let i = lines[start].startsWith('|') ? start : start + 1;
  while (i < lines.length && !lines[i].startsWith('|')) i++;
  const rows: string[][] = [];
  for (i += 2; i < lines.length && lines[i].startsWith('|'); i++) {
    rows.push(
      // Cells split on every `|` that is not escaped as `\|`.
      lines[i]
        .split(/(?<!\\)\|/)
        .slice(1, -1)
        .map((cell) => cell.replace(/\\\|/g, '|').trim()),
    );
  }
  if (rows.length === 0) throw new Error(`${page}: no table after ${anchor}`);
  return rows;
}

/** The option names a table's first column documents: `a`, `b.c`, `f(x)` → a, b.c, f. */
function documentedNames(page: string, anchor: string): string[] {
  return tableAfter(page, anchor).flatMap((row) =>
    codeSpans(row[0]).map((span) => span.replace(/\(.*\)$/, '').replace(/ <.*>$/, '')),
  );
}

// ---------------------------------------------------------------------------------------------
// The exported types, through the type checker.

const ENTRIES = ['index', 'core', 'typeorm', 'redis', 'testing', 'opentelemetry'].map((entry) =>
  path.join(SRC, `${entry}.ts`),
);
const program = ts.createProgram(ENTRIES, {
  target: ts.ScriptTarget.ES2023,
  module: ts.ModuleKind.Node16,
  moduleResolution: ts.ModuleResolutionKind.Node16,
  strict: true,
  noEmit: true,
  experimentalDecorators: true,
  skipLibCheck: true,
  types: ['node'],
});
const checker = program.getTypeChecker();

/** An export of one of the package's entry points (`index`, `testing`, …). */
function exported(entry: string, name: string): ts.Symbol {
  const file = program.getSourceFile(path.join(SRC, `${entry}.ts`))!;
  const found = checker
    .getExportsOfModule(checker.getSymbolAtLocation(file)!)
    .find((s) => s.name === name);
  if (!found) throw new Error(`nest-idempotency/${entry} exports no ${name}`);
  return found.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(found) : found;
}

/** The object types a type stands for (the object members of a union; not functions or arrays). */
function objectParts(type: ts.Type): ts.Type[] {
  const parts = type.isUnion() ? type.types : [type];
  return parts.filter(
    (t) =>
      t.isIntersection() ||
      ((t.flags & ts.TypeFlags.Object) !== 0 &&
        t.getCallSignatures().length === 0 &&
        !checker.isArrayType(t)),
  );
}

/** Property names of a type, nested ones (`a.b`) for properties whose type is an object. */
function propertiesOf(type: ts.Type): Map<string, ts.Type> {
  const out = new Map<string, ts.Type>();
  for (const part of objectParts(type)) {
    for (const property of checker.getPropertiesOfType(part)) {
      out.set(property.name, checker.getNonNullableType(checker.getTypeOfSymbol(property)));
    }
  }
  return out;
}

/** An exported interface or type alias, as a type. */
const typeOf = (entry: string, name: string) =>
  checker.getDeclaredTypeOfSymbol(exported(entry, name));

/** A type declared in one source file, exported or not. */
function declaredIn(file: string, name: string): ts.Type {
  const source = program.getSourceFile(path.join(SRC, file))!;
  const declaration = source.statements.find(
    (s) => (ts.isInterfaceDeclaration(s) || ts.isTypeAliasDeclaration(s)) && s.name.text === name,
  ) as ts.InterfaceDeclaration | ts.TypeAliasDeclaration | undefined;
  if (!declaration) throw new Error(`${file} declares no ${name}`);
  return checker.getTypeAtLocation(declaration.name);
}

/** The type of parameter `index` of an exported function. */
function parameterOf(entry: string, fn: string, index: number): ts.Type {
  const signature = checker.getTypeOfSymbol(exported(entry, fn)).getCallSignatures()[0];
  return checker.getNonNullableType(checker.getTypeOfSymbol(signature.parameters[index]));
}

/**
 * Compares documented option names with a type's properties: every name
 * documented is a property (`a.b`: `b` of `a`'s type), and every property is
 * documented, by its own name or by each of its nested properties.
 */
function undocumentedOrInvented(type: ts.Type, documented: string[]): string[] {
  const problems: string[] = [];
  const properties = propertiesOf(type);
  for (const name of documented) {
    const [head, ...rest] = name.split('.');
    let current = properties.get(head);
    for (const part of rest) current = current && propertiesOf(current).get(part);
    if (!current) problems.push(`documented, but not an option: ${name}`);
  }
  for (const [name, propertyType] of properties) {
    if (documented.includes(name)) continue;
    const nested = documented.filter((d) => d.startsWith(`${name}.`));
    if (nested.length === 0) {
      problems.push(`not documented: ${name}`);
      continue;
    }
    for (const child of propertiesOf(propertyType).keys()) {
      if (!nested.includes(`${name}.${child}`)) problems.push(`not documented: ${name}.${child}`);
    }
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------

describe('what the docs say about the code', () => {
  it('the checks find what they compare (a documented option the type lacks is caught)', () => {
    const harness = typeOf('testing', 'ContractHarness');
    expect(propertiesOf(harness).size).toBeGreaterThan(3);
    expect(undocumentedOrInvented(harness, [...propertiesOf(harness).keys()])).toEqual([]);
    const [first, ...others] = [...propertiesOf(harness).keys()];
    expect(undocumentedOrInvented(harness, [...others, 'noSuchOption'])).toEqual([
      'documented, but not an option: noSuchOption',
      `not documented: ${first}`,
    ]);
    expect(documentedNames('README.md', '`IdempotencyModule.forRoot`').length).toBeGreaterThan(10);
  });

  describe.each([
    ['README.md', '`IdempotencyModule.forRoot`', () => typeOf('index', 'IdempotencyModuleOptions')],
    ['README.md', '`@Idempotent(options)`', () => typeOf('index', 'IdempotentOptions')],
    ['README.md', '### `rmq`', () => typeOf('index', 'IdempotencyRmqOptions')],
    [
      'README.md',
      '### `new TypeOrmIdempotencyStore(',
      () => typeOf('typeorm', 'TypeOrmIdempotencyStoreOptions'),
    ],
    [
      'docs/storage.md',
      'The constructor refuses a `DataSource`',
      () => typeOf('typeorm', 'TypeOrmIdempotencyStoreOptions'),
    ],
    ['docs/redis.md', '## Options', () => typeOf('redis', 'RedisIdempotencyStoreOptions')],
    ['docs/writing-a-store.md', '### The harness', () => typeOf('testing', 'ContractHarness')],
    [
      'docs/writing-a-store.md',
      '`describeIdempotencyStoreContract(name, makeHarness, options)` takes',
      () => parameterOf('testing', 'describeIdempotencyStoreContract', 2),
    ],
    [
      'docs/writing-a-store.md',
      '`runIdempotencyStoreContract(harness, options)` takes',
      () => parameterOf('testing', 'runIdempotencyStoreContract', 1),
    ],
  ])('%s, the table after %s', (page, anchor, type) => {
    it('names every option of the type, and only those', () => {
      expect(undocumentedOrInvented(type(), documentedNames(page, anchor))).toEqual([]);
    });
  });

  it('docs/records-and-leases.md: the durations table names options of `defaults`', () => {
    const defaults = propertiesOf(typeOf('index', 'IdempotencyDefaults'));
    for (const name of documentedNames('docs/records-and-leases.md', '## Lease and waitTimeout')) {
      expect(defaults.has(name), name).toBe(true);
    }
  });

  it('gives the built-in durations and store limits as defaults', () => {
    const defaultOf = (page: string, anchor: string, name: string) =>
      tableAfter(page, anchor).find(([cell]) => codeSpans(cell).includes(name))?.[1];
    for (const [name, value] of Object.entries(BUILT_IN_DEFAULTS)) {
      expect(defaultOf('README.md', '`IdempotencyModule.forRoot`', `defaults.${name}`)).toBe(
        `\`${value}\``,
      );
      expect(defaultOf('docs/records-and-leases.md', '## Lease and waitTimeout', name)).toBe(
        `\`${value}\``,
      );
    }
    const mib = `${DEFAULT_MAX_PAYLOAD_BYTES / 1024 / 1024} MiB`;
    for (const [page, anchor] of [
      ['README.md', '### `new TypeOrmIdempotencyStore('],
      ['docs/storage.md', 'The constructor refuses a `DataSource`'],
      ['docs/redis.md', '## Options'],
    ]) {
      const waiters = defaultOf(page, anchor, 'maxWaiters')!.replace(/[`,]/g, '');
      expect(Number(waiters), `${page} maxWaiters`).toBe(DEFAULT_MAX_WAITERS);
      expect(defaultOf(page, anchor, 'maxPayloadBytes'), `${page} maxPayloadBytes`).toBe(mib);
    }
  });

  it('docs/writing-a-store.md quotes IdempotencyStore with the members it has', () => {
    const page = read('docs/writing-a-store.md');
    const quoted =
      /```ts\n(?:(?!```)[\s\S])*?(export interface IdempotencyStore \{[\s\S]*?\n\})/.exec(page)![1];
    const source = ts.createSourceFile('quoted.ts', quoted, ts.ScriptTarget.Latest);
    const members = (source.statements[0] as ts.InterfaceDeclaration).members.map((m) =>
      m.name!.getText(source),
    );
    expect(members).toEqual([...propertiesOf(typeOf('core', 'IdempotencyStore')).keys()]);
  });

  describe('the conformance kit', () => {
    const writing = read('docs/writing-a-store.md');
    const cli = read('docs/cli.md');

    it('has as many scenarios as the pages say', () => {
      const stated = [
        ...[...writing.matchAll(/`STORE_CONTRACT`: (\d+) scenarios/g)].map((m) => m[1]),
        ...[...cli.matchAll(/the same\s+(\d+) scenarios/g)].map((m) => m[1]),
      ];
      expect(stated).toHaveLength(2);
      for (const count of stated) expect(Number(count)).toBe(STORE_CONTRACT.length);
    });

    it('docs/writing-a-store.md lists every scenario, in its group, in the catalogue', () => {
      const documented = tableAfter('docs/writing-a-store.md', '### The catalogue').map(
        ([group, ids]) =>
          [
            group,
            codeSpans(ids)
              .filter((id) => /^[\w-]+\.[\w-]+$/.test(id))
              .sort(),
          ] as const,
      );
      const groups = [...new Set(STORE_CONTRACT.map((s) => s.group))];
      expect(documented).toEqual(
        groups.map(
          (group) =>
            [
              group,
              STORE_CONTRACT.filter((s) => s.group === group)
                .map((s) => s.id)
                .sort(),
            ] as const,
        ),
      );
    });

    it('docs/writing-a-store.md names every field of a result', () => {
      const sentence = /Each result has ([^.]*)\./.exec(writing)![1];
      expect(codeSpans(sentence).sort()).toEqual(
        [...propertiesOf(typeOf('testing', 'ScenarioResult')).keys()].sort(),
      );
    });

    it("docs/writing-a-store.md gives the scale's defaults", () => {
      const scale = tableAfter(
        'docs/writing-a-store.md',
        '`describeIdempotencyStoreContract(name, makeHarness, options)` takes',
      ).filter(([name]) => name.startsWith('`scale.'));
      expect(scale.map(([name]) => codeSpans(name)[0].slice('scale.'.length)).sort()).toEqual(
        Object.keys(DEFAULT_SCALE).sort(),
      );
      for (const [name, defaults] of scale) {
        const key = codeSpans(name)[0].slice('scale.'.length) as keyof typeof DEFAULT_SCALE;
        expect(defaults.replace(/,/g, ''), name).toContain(String(DEFAULT_SCALE[key]));
      }
    });

    it("docs/cli.md shows verify's progress line as the CLI counts", () => {
      const line = /verify: (\d+) of (\d+) checks done; now: ([\w.-]+)/.exec(cli)!;
      expect(Number(line[2])).toBe(STORE_CONTRACT.length);
      expect(STORE_CONTRACT[Number(line[1])].id).toBe(line[3]);
    });

    it("docs/cli.md gives verify's summary on Redis as the CLI counts it", () => {
      // The harness the CLI gives a Redis store, read from its source; the store's own capabilities.
      const declared = harnessFlags(path.join(SRC, 'cli/redis-backend.ts'));
      const harness = {
        ...declared,
        store: { strictMode: {}, steps: {}, continuations: {} },
      } as unknown as ContractHarness;
      const notApplying = STORE_CONTRACT.filter((s) => s.notApplicable?.(harness) !== undefined);
      const pass = STORE_CONTRACT.length - notApplying.length;
      const n = notApplying.length;
      const flat = cli.replace(/\s+/g, ' ');
      const summary = `\`${pass} PASS, 0 FAIL, ${n} N/A (${n} of them ${n === 1 ? 'does' : 'do'} not apply to this store): verified.\``;
      expect(flat.includes(summary), `docs/cli.md should say ${summary}`).toBe(true);
      // The paragraph names the scenarios that do not apply.
      const paragraph = /not apply to Redis:(.*?)It does not fail/.exec(flat)![1];
      expect(codeSpans(paragraph).filter((s) => /^[\w-]+\.[\w-]+$/.test(s))).toEqual(
        notApplying.map((s) => s.id),
      );
    });
  });

  it("docs/cli.md lists the CLI's program-wide options", () => {
    const source = fs.readFileSync(path.join(SRC, 'cli/run.ts'), 'utf8');
    const file = ts.createSourceFile('run.ts', source, ts.ScriptTarget.Latest, true);
    const flags: string[] = [];
    const visit = (node: ts.Node): void => {
      if (
        ts.isCallExpression(node) &&
        ts.isPropertyAccessExpression(node.expression) &&
        node.expression.name.text === 'option' &&
        ts.isStringLiteral(node.arguments[0])
      ) {
        flags.push(node.arguments[0].text);
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
    // Each flag parses as commander parses it.
    const longs = flags.map((flag) => new Command().option(flag).options[0].long);
    const documented = tableAfter('docs/cli.md', '## Connecting').map(
      ([cell]) => codeSpans(cell)[0],
    );
    expect(documented.sort()).toEqual([...flags].sort());
    expect(longs.every(Boolean)).toBe(true);
  });

  it("docs/cli.md's usage lines give each command's options, and their ranges as the CLI checks them", () => {
    const cli = read('docs/cli.md');
    const usage = cli.split('\n').filter((line) => line.startsWith('nest-idempotency '));
    const globals = new Set(
      tableAfter('docs/cli.md', '## Connecting').map(([cell]) => codeSpans(cell)[0].split(' ')[0]),
    );
    const commands = commandOptions();
    expect(commands.map((c) => c.name)).toEqual(
      expect.arrayContaining(['list', 'inspect', 'purge', 'resolve', 'verify', 'schema-sql']),
    );
    for (const command of commands) {
      const lines = usage.filter((line) => line.startsWith(`nest-idempotency ${command.name} `));
      expect(lines.length, command.name).toBeGreaterThan(0);
      const named = new Set(lines.flatMap((line) => line.match(/--[\w-]+/g) ?? []));
      for (const option of command.options) {
        expect(named.has(option.long), `${command.name} ${option.long}`).toBe(true);
      }
      const known = new Set([...command.options.map((o) => o.long), ...globals]);
      for (const flag of named) expect(known.has(flag), `${command.name} ${flag}`).toBe(true);
      for (const option of command.options.filter((o) => o.range)) {
        const stated = new RegExp(`\`${option.long}\` \\(([^)]*)\\)`).exec(cli);
        if (!stated) continue;
        const [min, max] = option.range!.map((n) => n.toLocaleString('en-US'));
        expect(stated[1], option.long).toContain(`${min} to ${max}`);
        if (option.default !== undefined) {
          expect(stated[1], option.long).toContain(
            `default ${option.default.toLocaleString('en-US')}`,
          );
        }
      }
    }
  });

  it('docs/cli.md lists every exit code, and only those', () => {
    const documented = tableAfter('docs/cli.md', '## Exit codes').map(([code]) => Number(code));
    expect(documented.sort((a, b) => a - b)).toEqual(Object.values(ExitCode).sort((a, b) => a - b));
  });

  describe('docs/observability.md', () => {
    const page = 'docs/observability.md';

    it('lists every instrument the library creates, with its kind and unit', () => {
      const created: string[][] = [];
      const instrument = (kind: string) => (name: string, options?: { unit?: string }) => {
        created.push([name, kind, options?.unit ?? '']);
        return { add: () => undefined, record: () => undefined };
      };
      const meter = {
        createCounter: instrument('counter'),
        createHistogram: instrument('histogram'),
        createUpDownCounter: instrument('up-down counter'),
        createGauge: instrument('gauge'),
      };
      const stop = instrumentIdempotencyEngine(
        new IdempotencyEngine(new InMemoryIdempotencyStore()),
        { meter: meter as never },
      );
      stop();
      new TracingIdempotencyStore(new InMemoryIdempotencyStore(), {
        meter: meter as never,
        tracer: {} as never,
      });
      expect(created.length).toBeGreaterThan(3);
      const documented = tableAfter(page, '| Name | Instrument |').map(([name, kind, unit]) => [
        codeSpans(name)[0],
        kind,
        codeSpans(unit)[0] ?? '',
      ]);
      expect(documented.sort()).toEqual(created.sort());
    });

    it('gives the duration buckets', () => {
      const text = read(page);
      const listed = /advice\.explicitBucketBoundaries`\), in seconds:\n\n```\n(.*)\n```/.exec(
        text,
      )![1];
      expect(listed.split(', ').map(Number)).toEqual([...IDEMPOTENCY_DURATION_BUCKETS_SECONDS]);
      expect(text).toContain(
        `with ${IDEMPOTENCY_DURATION_BUCKETS_SECONDS.length + 1} buckets counting`,
      );
    });
  });

  describe("the README's table of the other doors", () => {
    // Columns: situation, gRPC, WebSocket gateway, CQRS command, BullMQ job, @Cron tick.
    const rows = () => tableAfter('README.md', 'The other doors');
    const row = (situation: string) => {
      const found = rows().find((cells) => cells[0].startsWith(situation));
      if (!found) throw new Error(`README.md: no row "${situation}" in the other doors' table`);
      return found;
    };
    const statusName = (status: number) =>
      Object.entries(GRPC_STATUS).find(([, value]) => value === status)![0];
    /** The refusal each row is about, and whether it carries a retry delay. */
    const REFUSAL_ROWS: [string, string[], boolean][] = [
      ['Repeat while the first runs', ['idempotency-in-flight'], true],
      ['Same key, other request', ['idempotency-key-reused'], false],
      ['No key, bad key', ['idempotency-key-missing', 'idempotency-key-invalid'], false],
      ['The store is down', ['idempotency-store-unavailable'], true],
      ['Strict mode', ['idempotency-outcome-unknown'], false],
    ];

    it('has a column per door', () => {
      const header = read('README.md')
        .split('\n')
        .find((line) => line.startsWith('| Situation | gRPC'))!;
      expect(header.split('|').map((cell) => cell.trim())).toEqual([
        '',
        'Situation',
        'gRPC (unary)',
        'WebSocket gateway',
        'CQRS command',
        'BullMQ job',
        '`@Cron` tick',
        '',
      ]);
      for (const cells of rows()) expect(cells, cells[0]).toHaveLength(6);
    });

    it.each(REFUSAL_ROWS)(
      '%s: the gRPC status and the gateway code the doors send',
      (situation, codes, retry) => {
        const [, grpc, gateway] = row(situation);
        for (const code of codes) {
          expect(grpc).toContain(`\`${statusName(GRPC_STATUS_OF_REFUSAL[code])}\``);
          expect(gateway).toContain(`\`${code}\``);
        }
        const trailer = `\`${GRPC_RETRY_AFTER_TRAILER}\``;
        if (retry) {
          expect(grpc).toContain(`, ${trailer}`);
          expect(gateway).toContain('with `retryAfterMs`');
        } else {
          expect(grpc).not.toContain(`, ${trailer}`);
          expect(gateway).not.toContain('with `retryAfterMs`');
        }
      },
    );

    it('names only error classes the library or BullMQ exports', () => {
      const names = rows().flatMap((cells) =>
        cells.flatMap(codeSpans).filter((span) => /^[A-Z]\w*Error$/.test(span)),
      );
      expect(names.length).toBeGreaterThan(5);
      for (const name of names) {
        const exported =
          (idempotency as Record<string, unknown>)[name] ??
          (bullmq as Record<string, unknown>)[name];
        expect(typeof exported, name).toBe('function');
        expect((exported as { prototype: unknown }).prototype, name).toBeInstanceOf(Error);
      }
    });
  });

  it('names only refusal codes the library has, and every one of them', () => {
    const refusal = declaredIn('core/refusal.ts', 'Refusal');
    const codes = (refusal.isUnion() ? refusal.types : [refusal]).map((t) => {
      const code = checker.getTypeOfSymbol(t.getProperty('code')!);
      return (code as ts.StringLiteralType).value;
    });
    expect(codes.length).toBeGreaterThan(5);
    const text = pages().map(read).join('\n');
    for (const code of codes) expect(text, code).toContain(`\`${code}\``);
    const literals = sourceStrings();
    const documented = new Set(
      [...text.matchAll(/`(idempotency-[a-z]+(?:-[a-z]+)+)`/g)].map((m) => m[1]),
    );
    for (const code of documented) expect(literals.has(code), code).toBe(true);
  });
});

/** The string-valued flags (`clock`, `expiry`, `strictMode`) of the `ContractHarness` a CLI backend builds. */
function harnessFlags(file: string): Partial<ContractHarness> {
  const source = ts.createSourceFile(
    file,
    fs.readFileSync(file, 'utf8'),
    ts.ScriptTarget.Latest,
    true,
  );
  let found: Record<string, unknown> | undefined;
  const visit = (node: ts.Node): void => {
    if (
      ts.isVariableDeclaration(node) &&
      node.type?.getText(source) === 'ContractHarness' &&
      node.initializer &&
      ts.isObjectLiteralExpression(node.initializer)
    ) {
      found = {};
      for (const property of node.initializer.properties) {
        if (!ts.isPropertyAssignment(property)) continue;
        const name = property.name.getText(source);
        const value = property.initializer;
        if (ts.isStringLiteral(value)) found[name] = value.text;
        if (value.kind === ts.SyntaxKind.TrueKeyword) found[name] = true;
        if (value.kind === ts.SyntaxKind.FalseKeyword) found[name] = false;
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  if (!found) throw new Error(`${file} builds no ContractHarness`);
  return found as Partial<ContractHarness>;
}

/** Every string literal of the library's sources (specs excluded). */
function sourceStrings(): Set<string> {
  const out = new Set<string>();
  for (const name of fs.readdirSync(SRC, { recursive: true }) as string[]) {
    if (!name.endsWith('.ts') || name.endsWith('.spec.ts')) continue;
    const file = path.join(SRC, name);
    const source = ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
    const visit = (node: ts.Node): void => {
      if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) out.add(node.text);
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return out;
}

interface CommandOption {
  long: string;
  range?: [number, number];
  default?: number;
}

/** Each command of the CLI (one file of cli/ each) with its options, read from its source. */
function commandOptions(): { name: string; options: CommandOption[] }[] {
  const out: { name: string; options: CommandOption[] }[] = [];
  const number = (node: ts.Expression | undefined): number | undefined => {
    if (!node) return undefined;
    const value = Number(node.getText().replace(/_/g, ''));
    return ts.isNumericLiteral(node) && Number.isFinite(value) ? value : undefined;
  };
  for (const name of fs.readdirSync(path.join(SRC, 'cli'))) {
    if (!name.endsWith('.ts') || name === 'run.ts') continue;
    const file = path.join(SRC, 'cli', name);
    const source = ts.createSourceFile(
      file,
      fs.readFileSync(file, 'utf8'),
      ts.ScriptTarget.Latest,
      true,
    );
    let command: string | undefined;
    const options: CommandOption[] = [];
    const visit = (node: ts.Node): void => {
      // `.addOption(new Option(flags, …).choices(…))`
      if (
        ts.isNewExpression(node) &&
        node.expression.getText() === 'Option' &&
        node.arguments?.[0] &&
        ts.isStringLiteral(node.arguments[0])
      ) {
        options.push({ long: new Command().option(node.arguments[0].text).options[0].long! });
      }
      if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression)) {
        const method = node.expression.name.text;
        const [first, , parser, fallback] = node.arguments;
        if (method === 'command' && first && ts.isStringLiteral(first)) command = first.text;
        let flags: string | undefined;
        if (method === 'option' && first && ts.isStringLiteral(first)) flags = first.text;
        if (flags) {
          const option: CommandOption = { long: new Command().option(flags).options[0].long! };
          if (
            method === 'option' &&
            parser &&
            ts.isCallExpression(parser) &&
            parser.expression.getText() === 'wholeNumber'
          ) {
            const [min, max] = parser.arguments.map((a) => number(a));
            if (min !== undefined && max !== undefined) option.range = [min, max];
            option.default = number(fallback);
          }
          options.push(option);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
    if (command) out.push({ name: command, options });
  }
  return out;
}
