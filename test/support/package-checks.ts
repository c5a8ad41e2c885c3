import fs from 'node:fs';
import path from 'node:path';
import {
  isAbsoluteOrAnchor,
  markdownLinks,
  repositoryUrl,
  resolveLink,
} from '../../tools/package-docs.mjs';

/**
 * Checks of a package folder as it ships (an unpacked tarball, or a folder
 * staged the way prepack stages one). Each returns what is wrong, one line per
 * problem, so a test shows them all at once.
 */

const ROOT = path.resolve(__dirname, '../..');

function filesUnder(dir: string, base = dir): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return filesUnder(full, base);
    return [path.relative(base, full).split(path.sep).join('/')];
  });
}

/**
 * Every link of every Markdown file: a relative one must name a file of the
 * package; an absolute one into the package's repository must name a path
 * the repository has (this checkout).
 */
export function brokenLinks(packageDir: string): string[] {
  const manifest = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8'));
  const repository = repositoryUrl(manifest);
  const intoRepository = new RegExp(
    `^${repository.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/(?:blob|tree)/main/([^#]+)`,
  );
  const files = new Set(filesUnder(packageDir));
  const problems: string[] = [];
  for (const document of [...files].filter((f) => f.endsWith('.md'))) {
    const markdown = fs.readFileSync(path.join(packageDir, document), 'utf8');
    for (const { target } of markdownLinks(markdown)) {
      const inRepository = intoRepository.exec(target);
      if (inRepository) {
        if (!fs.existsSync(path.join(ROOT, inRepository[1]))) {
          problems.push(
            `${document}: ${target} names ${inRepository[1]}, which the repository does not have`,
          );
        }
        continue;
      }
      if (isAbsoluteOrAnchor(target)) continue;
      const resolved = resolveLink(document, target).path;
      if (!files.has(resolved)) {
        problems.push(`${document}: ${target} is relative, and ${resolved} is not in the package`);
      }
    }
  }
  return problems;
}

/** Every source map's sources are in the package, or inlined as `sourcesContent`. */
export function unresolvedSourceMaps(packageDir: string): string[] {
  const problems: string[] = [];
  for (const file of filesUnder(packageDir).filter((f) => f.endsWith('.map'))) {
    const map = JSON.parse(fs.readFileSync(path.join(packageDir, file), 'utf8')) as {
      sources: string[];
      sourcesContent?: (string | null)[];
    };
    map.sources.forEach((source, i) => {
      const shipped = fs.existsSync(path.join(packageDir, path.dirname(file), source));
      if (!shipped && typeof map.sourcesContent?.[i] !== 'string') {
        problems.push(`${file}: ${source} is neither in the package nor inlined`);
      }
    });
  }
  return problems;
}

/** Every target of `exports` (and `main`, `types`, `bin`) is a file of the package. */
export function missingExportTargets(packageDir: string): string[] {
  const manifest = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8'));
  const targets: string[] = [manifest.main, manifest.types, ...Object.values(manifest.bin ?? {})];
  const walk = (value: unknown): void => {
    if (typeof value === 'string') targets.push(value);
    else if (value && typeof value === 'object') Object.values(value).forEach(walk);
  };
  walk(manifest.exports);
  return targets
    .filter((target): target is string => typeof target === 'string')
    .filter((target) => !fs.existsSync(path.join(packageDir, target)))
    .map((target) => `${target} is named by package.json but not in the package`);
}
