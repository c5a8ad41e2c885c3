import type { RecordId } from '../core/store';
import type { RedisCommands } from '../stores/redis/client';
import type { RedisIdempotencyStore } from '../stores/redis/redis.store';
import { digestNames } from './record-reference';
import { tenantsOf } from './sql-digest-search';

/**
 * `findByDigest` on Redis. SHA-256 is not among Redis's Lua functions, so
 * keys are hashed here, which means reading them: every record of the scope
 * travels once. A record's name is `<prefix>r:<16 hex of its stored scope>:{…}`,
 * which names the scope but not the handler's scope of a tenant's, so for a
 * scope without a tenant every record under the prefix is SCANned (COUNT 1000
 * a step, on every master). The stored scope of each 16-hex group is read
 * once (HMGET of one record); only the records of groups in the scope are
 * read (HMGET of scope and key, pipelined a step at a time) and hashed.
 * A stored scope with its tenant SCANs that scope's records alone.
 */
export async function findByDigestOnRedis(
  commands: RedisCommands,
  store: RedisIdempotencyStore,
  scope: string,
  hex: string,
  onRead: (count: number) => void = () => undefined,
): Promise<RecordId[]> {
  const tenants = tenantsOf(scope);
  const inScope = (stored: string) =>
    stored === scope || (tenants !== null && stored.startsWith(tenants));
  const scopeOfGroup = new Map<string, string>();
  const groupOf = groupReader(store.keys.prefix);
  const readScope = async (key: string) => {
    const [stored] = (await commands.send('findByDigest', key, ['HMGET', key, 's'])) as [
      Buffer | null,
    ];
    return stored === null ? null : stored.toString('utf8');
  };

  const seen = new Set<string>();
  const found: RecordId[] = [];
  const pattern = store.keys.pattern(tenants === null ? scope : undefined);
  for (const node of await commands.masters('findByDigest')) {
    let cursor = '0';
    do {
      const [next, names] = (await commands.sendTo(node, 'findByDigest', [
        'SCAN',
        cursor,
        'MATCH',
        pattern,
        'COUNT',
        '1000',
        'TYPE',
        'hash',
      ])) as [Buffer, Buffer[]];
      cursor = String(next);
      // SCAN may return a key twice.
      const fresh = names.map(String).filter((name) => !seen.has(name));
      for (const name of fresh) seen.add(name);
      for (const name of fresh) {
        const group = groupOf(name);
        if (group === undefined || scopeOfGroup.has(group)) continue;
        const stored = await readScope(name);
        if (stored !== null) scopeOfGroup.set(group, stored);
      }
      const wanted = fresh.filter((name) => {
        const group = groupOf(name);
        // A name of another shape is read, not skipped: a guess must not hide a record.
        if (group === undefined) return true;
        const stored = scopeOfGroup.get(group);
        return stored === undefined || inScope(stored);
      });
      const heads = (await Promise.all(
        wanted.map((name) => commands.send('findByDigest', name, ['HMGET', name, 's', 'k'])),
      )) as Array<[Buffer | null, Buffer | null]>;
      for (const [stored, key] of heads) {
        // Expired since the SCAN, or not a record.
        if (stored === null || key === null) continue;
        const id = { scope: stored.toString('utf8'), key: key.toString('utf8') };
        if (inScope(id.scope) && digestNames(id, hex)) found.push(id);
      }
      onRead(seen.size);
    } while (cursor !== '0');
  }
  return found;
}

/** The 16-hex scope group of a record's name under `prefix`, or undefined for another shape. */
function groupReader(prefix: string): (name: string) => string | undefined {
  const shape = /^r:([0-9a-f]{16}):\{/;
  return (name) =>
    name.startsWith(prefix) ? shape.exec(name.slice(prefix.length))?.[1] : undefined;
}
