// The documentation the package ships: README.md, CHANGELOG.md, LICENSE and
// docs/*.md, copied from the repository into libs/idempotency (where they are
// git-ignored) by prepack. A relative link stays relative when it points at
// one of those files, so it works in node_modules as on the repository's
// pages; a link to anything else (the demo, the benchmarks, a test) becomes an
// absolute link into the repository named by package.json's `repository`, the
// one place that URL is written. A relative link to a path the repository does
// not have fails the pack.
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');
export const PACKAGE = path.join(ROOT, 'libs/idempotency');
/** The branch absolute links point into. */
const BRANCH = 'main';

/** The shipped documents, as repository paths (POSIX separators). */
export function shippedDocuments(root = ROOT) {
  const docs = fs
    .readdirSync(path.join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', 'CHANGELOG.md', 'LICENSE', ...docs];
}

/** `https://github.com/owner/name` from package.json's `repository`. */
export function repositoryUrl(manifest) {
  const url =
    typeof manifest.repository === 'string' ? manifest.repository : manifest.repository?.url;
  if (!url) throw new Error('libs/idempotency/package.json has no "repository"');
  return url.replace(/^git\+/, '').replace(/\.git$/, '');
}

/**
 * Every inline link and image of a Markdown text outside code (fenced blocks
 * and code spans), with the offsets of its target.
 */
export function markdownLinks(markdown) {
  const links = [];
  const code = /```[\s\S]*?```|`[^`\n]*`/g;
  const link = /!?\[[^\]\n]*\]\(\s*([^)\s]+)(?:\s+"[^"]*")?\s*\)/g;
  let last = 0;
  const scan = (from, to) => {
    const text = markdown.slice(from, to);
    for (const match of text.matchAll(link)) {
      const start = from + match.index + match[0].indexOf(match[1], match[0].indexOf(']('));
      links.push({ target: match[1], start, end: start + match[1].length });
    }
  };
  for (const match of markdown.matchAll(code)) {
    scan(last, match.index);
    last = match.index + match[0].length;
  }
  scan(last, markdown.length);
  return links;
}

/** A link that leaves the document set: a URL (`https:`, `mailto:`) or an anchor of the same page. */
export function isAbsoluteOrAnchor(target) {
  return /^[a-z][a-z\d+.-]*:/i.test(target) || target.startsWith('#');
}

/** `docs/http.md#openapi` from `../docs/http.md#openapi` in `docs/x.md`: the repository path and the anchor. */
export function resolveLink(fromDocument, target) {
  const hash = target.indexOf('#');
  const file = hash === -1 ? target : target.slice(0, hash);
  const anchor = hash === -1 ? '' : target.slice(hash);
  const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(fromDocument), file));
  return { path: resolved.replace(/\/$/, ''), anchor };
}

/** The document with each link to something that does not ship made absolute. */
export function rewriteLinks(document, markdown, { root, shipped, repository }) {
  let out = '';
  let last = 0;
  for (const { target, start, end } of markdownLinks(markdown)) {
    if (isAbsoluteOrAnchor(target)) continue;
    const { path: target_, anchor } = resolveLink(document, target);
    if (shipped.includes(target_)) continue;
    const onDisk = path.join(root, target_);
    if (target_.startsWith('..') || !fs.existsSync(onDisk)) {
      throw new Error(
        `${document}: the link "${target}" points at ${target_}, which the repository does not have`,
      );
    }
    const kind = fs.statSync(onDisk).isDirectory() ? 'tree' : 'blob';
    out += `${markdown.slice(last, start)}${repository}/${kind}/${BRANCH}/${target_}${anchor}`;
    last = end;
  }
  return out + markdown.slice(last);
}

/** Copies the shipped documents into the package folder, links rewritten; returns their paths. */
export function stagePackageDocs({ root = ROOT, packageDir = PACKAGE } = {}) {
  const manifest = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8'));
  const repository = repositoryUrl(manifest);
  const shipped = shippedDocuments(root);
  fs.rmSync(path.join(packageDir, 'docs'), { recursive: true, force: true });
  for (const document of shipped) {
    const source = fs.readFileSync(path.join(root, document), 'utf8');
    const staged = document.endsWith('.md')
      ? rewriteLinks(document, source, { root, shipped, repository })
      : source;
    fs.mkdirSync(path.dirname(path.join(packageDir, document)), { recursive: true });
    fs.writeFileSync(path.join(packageDir, document), staged);
  }
  return shipped;
}
