import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/**
 * docs/troubleshooting.md lists the messages the library prints, each as the
 * code writes it with `…` where a value is filled in. This keeps the page
 * honest: the first cell of every table row that is a code span is split on
 * `…`, and its literal fragments must occur, in that order, in one string of
 * the library's sources (libs/idempotency/src, specs excluded). Strings are
 * read with the TypeScript parser, so escapes are decoded and each `${…}` of a
 * template is a placeholder that only a `…` of the page can stand for.
 */
const ROOT = path.resolve(__dirname, '../..');
const SRC = path.join(ROOT, 'libs/idempotency/src');
const PAGE = path.join(ROOT, 'docs/troubleshooting.md');
const ELLIPSIS = '…';
/** Stands for a template's `${…}` in the extracted strings; never part of a fragment. */
const PLACEHOLDER = '\u0000';

interface DocumentedMessage {
  line: number;
  section: string;
  message: string;
}

/** Every table row whose first cell is a code span, with the section it is under. */
function documentedMessages(markdown: string): DocumentedMessage[] {
  const out: DocumentedMessage[] = [];
  let section = '';
  markdown.split('\n').forEach((text, index) => {
    const heading = /^#{1,6}\s+(.*)$/.exec(text);
    if (heading) {
      section = heading[1];
      return;
    }
    // A code span of any number of backticks, alone in the first cell.
    const row = /^\|\s*(`+)(?!`)([\s\S]*?[^`])\1(?!`)\s*\|/.exec(text);
    if (!row) return;
    let message = row[2].replace(/\\\|/g, '|');
    // CommonMark strips one space on each side of a code span that has both.
    if (message.startsWith(' ') && message.endsWith(' ') && message.trim() !== '') {
      message = message.slice(1, -1);
    }
    out.push({ line: index + 1, section, message });
  });
  return out;
}

/** The library's source files, specs excluded. */
function sourceFiles(): string[] {
  return (fs.readdirSync(SRC, { recursive: true }) as string[])
    .filter((name) => name.endsWith('.ts') && !name.endsWith('.spec.ts'))
    .map((name) => path.join(SRC, name))
    .sort();
}

/** Every string literal and template of one file, as the program sees it (escapes decoded). */
function stringsOf(file: string): string[] {
  const source = ts.createSourceFile(
    file,
    fs.readFileSync(file, 'utf8'),
    ts.ScriptTarget.Latest,
    false,
    ts.ScriptKind.TS,
  );
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) {
      out.push(node.text);
    } else if (ts.isTemplateExpression(node)) {
      out.push(
        node.head.text + node.templateSpans.map((span) => PLACEHOLDER + span.literal.text).join(''),
      );
    }
    // Templates nested in a placeholder are strings of their own.
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** The literal fragments of a documented message: the text between its `…`s. */
function fragmentsOf(message: string): string[] {
  return message.split(ELLIPSIS).filter((fragment) => fragment.length > 0);
}

/**
 * True when `message` is how `text` reads: its fragments occur in order, and
 * every `…` between two of them stands for at least one value (a placeholder,
 * or a `…` the code writes itself), never for words the page left out. A
 * message that does not start (end) with `…` starts (ends) where the string does.
 */
function matches(text: string, message: string): boolean {
  const fragments = fragmentsOf(message);
  if (fragments.length === 0) return false;
  const open = message.startsWith(ELLIPSIS);
  const closed = !message.endsWith(ELLIPSIS);
  const standsForValue = (gap: string) => gap.includes(PLACEHOLDER) || gap.includes(ELLIPSIS);
  const from = (index: number, position: number): boolean => {
    if (index === fragments.length) return !closed || position === text.length;
    const fragment = fragments[index];
    for (let at = text.indexOf(fragment, position); at >= 0; at = text.indexOf(fragment, at + 1)) {
      if (index === 0 && !open && at !== 0) return false;
      if (index > 0 && !standsForValue(text.slice(position, at))) continue;
      if (from(index + 1, at + fragment.length)) return true;
    }
    return false;
  };
  return from(0, 0);
}

const strings = sourceFiles().flatMap(stringsOf);
const printed = (message: string) => strings.some((text) => matches(text, message));
const rows = documentedMessages(fs.readFileSync(PAGE, 'utf8'));

describe('docs/troubleshooting.md', () => {
  it('lists its messages in tables (the parser found them)', () => {
    expect(rows.length).toBeGreaterThan(100);
    expect(new Set(rows.map((row) => row.section)).size).toBeGreaterThan(4);
  });

  it('tells an invented message from a printed one', () => {
    // Both are in the sources: a template with placeholders, and a plain string.
    expect(printed('header … was sent … times')).toBe(true);
    expect(printed('the idempotency store is unavailable; retry later')).toBe(true);
    // A word changed, fragments out of order, a fragment that spans a placeholder.
    expect(printed('header … was received … times')).toBe(false);
    expect(printed('… times header … was sent')).toBe(false);
    expect(printed('header Idempotency-Key was sent … times')).toBe(false);
    // A `…` stands for a value, not for words: the code writes "idempotency key" here.
    expect(printed('this … was already used with a different request')).toBe(false);
    expect(printed('this idempotency key was already used with a different request')).toBe(true);
    // Without a leading `…` the string must start there; without a trailing one, end there.
    expect(printed('store is unavailable; retry later')).toBe(false);
    expect(printed('the idempotency store is unavailable')).toBe(false);
    expect(printed(ELLIPSIS)).toBe(false);
  });

  it.each(rows.map((row) => [`line ${row.line} (${row.section}): ${row.message}`, row] as const))(
    'the code prints %s',
    (_name, row) => {
      expect(
        fragmentsOf(row.message).some((fragment) => /[A-Za-z]{2}/.test(fragment)),
        'a message needs some words of its own',
      ).toBe(true);
      expect(printed(row.message), `no string in libs/idempotency/src reads "${row.message}"`).toBe(
        true,
      );
    },
  );
});
