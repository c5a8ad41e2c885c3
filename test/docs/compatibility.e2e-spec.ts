import fs from 'node:fs';
import path from 'node:path';
import semver from 'semver';

/**
 * The package's peer ranges and engines, the README's Compatibility table and
 * the stack this suite runs on say the same thing: each installed major is
 * inside the declared range (CI runs this on the Nest 12 and Nest 11 stacks).
 */
const ROOT = path.resolve(__dirname, '../..');
const manifest = JSON.parse(
  fs.readFileSync(path.join(ROOT, 'libs/idempotency/package.json'), 'utf8'),
) as {
  engines: { node: string };
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
};
const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');

function installed(name: string): string {
  const file = path.join(ROOT, 'node_modules', name, 'package.json');
  return (JSON.parse(fs.readFileSync(file, 'utf8')) as { version: string }).version;
}

describe('compatibility', () => {
  it.each([
    '@nestjs/common',
    '@nestjs/core',
    '@nestjs/microservices',
    'typeorm',
    'pg',
    'rxjs',
    'reflect-metadata',
  ])('the installed %s is inside the declared peer range', (name) => {
    const range = manifest.peerDependencies[name];
    expect(range, `${name} is a peer`).toBeDefined();
    expect(semver.satisfies(installed(name), range), `${name}@${installed(name)} in ${range}`).toBe(
      true,
    );
  });

  it('this Node.js is inside engines', () => {
    expect(semver.satisfies(process.version, manifest.engines.node)).toBe(true);
  });

  it('declares every transport, driver and Nest itself optional, so nothing unneeded is installed', () => {
    for (const name of Object.keys(manifest.peerDependencies)) {
      expect(manifest.peerDependenciesMeta[name]?.optional, name).toBe(true);
    }
  });

  it('the README states the same ranges', () => {
    const table = readme.slice(readme.indexOf('## Compatibility'), readme.indexOf('## Install'));
    const escaped = (range: string) => range.replace(/\|\|/g, '\\|\\|').replace(/\.0\.0/g, '');
    expect(table).toContain(`\`${manifest.engines.node}\``);
    expect(table).toContain(`\`${escaped(manifest.peerDependencies['@nestjs/common'])}\``);
    expect(table).toContain(
      `\`${escaped(manifest.peerDependencies.typeorm)}\``.replace('^1', '^1'),
    );
  });
});
