import fs from 'node:fs';
import path from 'node:path';
import { STORE_CONTRACT } from 'nest-idempotency/testing';

/**
 * What the documents say of the conformance kit, checked against the kit:
 * every "N scenarios" is the catalogue's size, and the catalogue table of
 * docs/writing-a-store.md names every scenario id.
 */
const ROOT = path.resolve(__dirname, '../..');
const documents = [
  'README.md',
  ...fs
    .readdirSync(path.join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

describe('the documents on the conformance kit', () => {
  it('give the catalogue its size wherever they count its scenarios', () => {
    const counts: string[] = [];
    for (const document of documents) {
      const text = fs.readFileSync(path.join(ROOT, document), 'utf8');
      for (const match of text.matchAll(/(\d+)\s+scenarios/g)) {
        counts.push(`${document}: ${match[1]}`);
      }
    }
    expect(counts.length).toBeGreaterThan(0);
    expect(counts).toEqual(counts.map((c) => c.replace(/\d+$/, String(STORE_CONTRACT.length))));
  });

  it('list every scenario id in the catalogue of docs/writing-a-store.md', () => {
    const text = fs.readFileSync(path.join(ROOT, 'docs/writing-a-store.md'), 'utf8');
    const missing = STORE_CONTRACT.map((s) => s.id).filter((id) => !text.includes(`\`${id}\``));
    expect(missing).toEqual([]);
  });
});
