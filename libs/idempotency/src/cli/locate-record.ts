import { scopeOfStored, storedKeyDigest } from '../core/key';
import type { IdempotencyRecordView, RecordId } from '../core/store';
import type { StoreHandle } from './connection';
import type { CommandContext } from './context';
import { CliError, ExitCode } from './exit-codes';
import { thousands } from './format';
import { recordJson, renderRecords } from './list';
import type { Progress } from './progress';
import { digestNames, inScope, RecordReference } from './record-reference';

/**
 * Which record a reference names: exactly one (`one`; for a raw key, whether
 * it exists is the command's to find out), `none`, or `several` when a
 * digest's 12 hex digits match more than one record. A command acts only on
 * `one`: with `several` nothing is done.
 */
export type Located =
  { kind: 'one'; id: RecordId } | { kind: 'none' } | { kind: 'several'; ids: RecordId[] };

/**
 * Finds the record a reference names. A digest is looked for in every record
 * of its scope (and of the scope's tenants); each candidate the backend
 * returns is checked here with `storedKeyDigest`, the function the logs use.
 * A digest given as a second argument also names the record whose raw key it
 * is, if there is one: two records answering to one name is `several`.
 */
export async function locateRecord(
  handle: StoreHandle,
  reference: RecordReference,
  progress: Progress,
): Promise<Located> {
  if (reference.kind === 'key') return { kind: 'one', id: reference };
  const { scope, hex } = reference;
  const searching = `searching ${scopeOfStored(scope)} for #${hex} (every record of the scope is read)`;
  progress.show(searching);
  const found = (
    await handle.findByDigest(scope, hex, (count) =>
      progress.show(`${searching}: ${thousands(count)} read`),
    )
  ).filter((id) => inScope(id, scope) && digestNames(id, hex));
  if (reference.asKey !== undefined) {
    const literal = await handle.store.find({ scope, key: reference.asKey });
    if (literal) found.push({ scope: literal.scope, key: literal.key });
  }
  const ids = unique(found);
  if (ids.length === 0) return { kind: 'none' };
  if (ids.length === 1) return { kind: 'one', id: ids[0] };
  return { kind: 'several', ids };
}

function unique(ids: RecordId[]): RecordId[] {
  const seen = new Map<string, RecordId>();
  for (const id of ids) seen.set(JSON.stringify([id.scope, id.key]), id);
  return [...seen.values()];
}

/**
 * The one record a command may act on, or a CliError: exit 5 when a digest
 * matches nothing, exit 7 when it matches several, after printing them
 * (with `--json`, with their raw keys, so that one can be named by its key).
 */
export async function requireOneRecord(
  context: CommandContext,
  handle: StoreHandle,
  reference: RecordReference,
  options: { json?: boolean },
): Promise<RecordId> {
  const located = await locateRecord(handle, reference, context.progress(options));
  context.clearProgress();
  switch (located.kind) {
    case 'one':
      return located.id;
    case 'none':
      throw new CliError(
        `no record for ${digestName(reference)} in ${handle.where}`,
        ExitCode.NOT_FOUND,
      );
    case 'several': {
      const views = (await Promise.all(located.ids.map((id) => handle.store.find(id)))).filter(
        (view): view is IdempotencyRecordView => view !== null,
      );
      const now = await handle.serverNow();
      if (options.json) {
        context.printJson({
          table: handle.where,
          name: digestName(reference),
          matches: views.map((view) => recordJson(view, now)),
        });
      } else {
        context.print(renderRecords(views, now));
      }
      throw new CliError(
        `${digestName(reference)} names ${located.ids.length} records in ${handle.where}: nothing was done; name the one you mean by its scope and raw key (--json prints them)`,
        ExitCode.SEVERAL_RECORDS,
      );
    }
  }
}

/** A reference as messages name it: `scope/#digest` (the handler's scope), never a raw key. */
function digestName(reference: RecordReference): string {
  return reference.kind === 'key'
    ? storedKeyDigest(reference.scope, reference.key)
    : `${scopeOfStored(reference.scope)}/#${reference.hex}`;
}
