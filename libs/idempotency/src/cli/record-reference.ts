import { scopeOfStored, storedKeyDigest } from '../core/key';
import type { RecordId } from '../core/store';
import { CliError, ExitCode } from './exit-codes';

/**
 * How an operator names one record on the command line:
 *
 * - `<scope> <key>`: the raw key, as the client sent it;
 * - `<scope>/#<digest>`: the name logs, events, errors and `list` print
 *   (`ChargesController.charge/#f55ff16f66f4`), in one argument;
 * - `<scope> '#<digest>'`: the scope and the digest apart (quoted: to a shell
 *   an unquoted `#` starts a comment).
 *
 * A digest is `#` and the 12 hex digits of `keyDigest`. Its scope is the
 * handler's scope, as logs print it; for a tenant's record that covers every
 * tenant of the scope, since the digest is taken over the tenant too. A
 * stored scope (`<scope>#tenant:<tenant>`, as `list` shows it) narrows the
 * search to that tenant.
 */
export type RecordReference =
  | { kind: 'key'; scope: string; key: string }
  | {
      kind: 'digest';
      scope: string;
      /** 12 lower-case hex digits. */
      hex: string;
      /**
       * Set when the digest came as a second argument: a raw key may itself look
       * like a digest, so the record of that key is a candidate too.
       */
      asKey?: string;
    };

const DIGEST = /^#([0-9a-fA-F]{12})$/;
const NAME_WITH_DIGEST = /^(.+)\/#([0-9a-fA-F]{12})$/;

/** The reference `inspect` and `resolve` got as `<scope> [key]`; exit 2 when it is none. */
export function parseRecordReference(first: string, second: string | undefined): RecordReference {
  if (!first) throw new CliError('<scope> must not be empty', ExitCode.USAGE);
  if (second === undefined) {
    const named = NAME_WITH_DIGEST.exec(first);
    if (named) return { kind: 'digest', scope: named[1], hex: named[2].toLowerCase() };
    const at = first.lastIndexOf('/#');
    if (at === 0) throw new CliError('<scope> must not be empty', ExitCode.USAGE);
    throw new CliError(
      at > 0
        ? `${first} is not a record's name: after "/#" a digest has exactly 12 hex digits`
        : `name the record: <scope> <key>, <scope>/#<digest> as the logs print it, or <scope> '#<digest>' (quoted: to a shell an unquoted # starts a comment)`,
      ExitCode.USAGE,
    );
  }
  if (!second) throw new CliError('<key> must not be empty', ExitCode.USAGE);
  const digest = DIGEST.exec(second);
  if (digest) return { kind: 'digest', scope: first, hex: digest[1].toLowerCase(), asKey: second };
  return { kind: 'key', scope: first, key: second };
}

/** How `inspect` and `resolve` describe their `<scope>` and `[key]` arguments. */
export const SCOPE_ARGUMENT =
  "the record's scope, e.g. ChargesController.charge; or the record as logs name it, ChargesController.charge/#f55ff16f66f4";
export const KEY_ARGUMENT =
  "the idempotency key as the client sent it, or '#' and the 12 hex digits of its digest (quoted)";

export const RECORD_REFERENCE_HELP = `
A record is named by its scope and raw key, or by the digest logs print:
  ChargesController.charge/#f55ff16f66f4      as one argument, copied from a log line
  ChargesController.charge '#f55ff16f66f4'    scope and digest (quote the #: to a shell it starts a comment)
A digest is searched for among every record of the scope, its tenants' included (with
<scope>#tenant:<tenant>, that tenant's only); one that matches several records does nothing
and exits 7.`;

/** True when the record's digest, as logs print it, ends in `#<hex>`. */
export function digestNames(id: RecordId, hex: string): boolean {
  return storedKeyDigest(id.scope, id.key).slice(-hex.length - 2) === `/#${hex}`;
}

/** The stored scope is `scope`, or, for a scope without a tenant, one of its tenants'. */
export function inScope(id: RecordId, scope: string): boolean {
  return (
    id.scope === scope || (scopeOfStored(scope) === scope && scopeOfStored(id.scope) === scope)
  );
}
