import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repositoryUrl, shippedDocuments, stagePackageDocs } from '../../tools/package-docs.mjs';
import { brokenLinks } from '../support/package-checks';

/**
 * The documents the package ships (README, CHANGELOG, LICENSE, docs/) as
 * prepack stages them: a reader of the README in node_modules or on the
 * registry can follow every link. The consumer fixtures check the same on the
 * packed tarball.
 */
const ROOT = path.resolve(__dirname, '../..');
const PACKAGE = path.join(ROOT, 'libs/idempotency');
const manifest = JSON.parse(fs.readFileSync(path.join(PACKAGE, 'package.json'), 'utf8')) as {
  repository: { url: string };
  homepage: string;
  bugs: { url: string };
  files: string[];
};

describe('the documents the package ships', () => {
  let staged: string;

  beforeAll(() => {
    staged = fs.mkdtempSync(path.join(os.tmpdir(), 'nest-idempotency-docs-'));
    fs.copyFileSync(path.join(PACKAGE, 'package.json'), path.join(staged, 'package.json'));
    stagePackageDocs({ packageDir: staged });
  });
  afterAll(() => {
    fs.rmSync(staged, { recursive: true, force: true });
  });

  it('ship README, CHANGELOG, LICENSE and every page of docs/', () => {
    const shipped = shippedDocuments();
    expect(shipped).toEqual(expect.arrayContaining(['README.md', 'CHANGELOG.md', 'LICENSE']));
    expect(shipped.filter((f) => f.startsWith('docs/')).length).toBe(
      fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).length,
    );
    for (const file of shipped) expect(fs.existsSync(path.join(staged, file)), file).toBe(true);
    expect(manifest.files).toEqual(
      expect.arrayContaining(['docs', 'README.md', 'CHANGELOG.md', 'LICENSE']),
    );
  });

  it('link only to files that ship, or absolutely to paths the repository has', () => {
    expect(brokenLinks(staged)).toEqual([]);
  });

  it('rewrites what does not ship to the repository, and leaves links between shipped documents relative', () => {
    const readme = fs.readFileSync(path.join(staged, 'README.md'), 'utf8');
    const repository = repositoryUrl(manifest);
    expect(readme).toContain(`](${repository}/tree/main/apps/demo)`);
    expect(readme).toContain('](docs/http.md)');
    expect(readme).not.toMatch(/\]\((?:\.\/)?(?:apps|bench|stacks|test)\//);
  });

  it('names the repository, its home page and its issues in package.json', () => {
    const repository = repositoryUrl(manifest);
    expect(repository).toMatch(/^https:\/\/github\.com\/[\w.-]+\/[\w.-]+$/);
    expect(manifest.homepage.startsWith(repository)).toBe(true);
    expect(manifest.bugs.url).toBe(`${repository}/issues`);
  });
});
