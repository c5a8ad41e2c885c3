import { Command } from 'commander';
import { storedKeyDigest } from '../core/key';
import { describePayload } from '../core/payload';
import { IdempotencyRecordView } from '../core/store';
import { withStore } from './connection';
import { CommandContext } from './context';
import { CliError, ExitCode } from './exit-codes';
import {
  formatDuration,
  formatInstant,
  instantWithRelative,
  leaseLabel,
  renderFields,
  stateLabel,
} from './format';
import { recordJson } from './list';
import { requireOneRecord } from './locate-record';
import {
  KEY_ARGUMENT,
  parseRecordReference,
  RECORD_REFERENCE_HELP,
  SCOPE_ARGUMENT,
} from './record-reference';

interface InspectOptions {
  json?: boolean;
}

/**
 * `inspect <scope> <key>`, `inspect <scope>/#<digest>` or
 * `inspect <scope> '#<digest>'`: the whole record, payload included, as
 * stored (that is, after the module's `sanitize`). A read: nothing changes.
 */
export function addInspectCommand(program: Command, context: CommandContext): void {
  program
    .command('inspect')
    .description('show one record, payload included (reads only)')
    .argument('<scope>', SCOPE_ARGUMENT)
    .argument('[key]', KEY_ARGUMENT)
    .option('--json', 'print JSON; includes the raw key')
    .addHelpText('after', RECORD_REFERENCE_HELP)
    .action(
      async (scope: string, key: string | undefined, options: InspectOptions, command: Command) => {
        const reference = parseRecordReference(scope, key);
        const connection = context.connection(command);
        await withStore(connection, async (handle) => {
          const { store, where, serverNow } = handle;
          const id = await requireOneRecord(context, handle, reference, options);
          const record = await store.find(id);
          if (!record) {
            throw new CliError(
              `no record for ${storedKeyDigest(id.scope, id.key)} in ${where}`,
              ExitCode.NOT_FOUND,
            );
          }
          const now = await serverNow();
          if (options.json) {
            context.printJson({
              table: where,
              serverTime: now.toISOString(),
              record: {
                ...recordJson(record, now),
                ...payloadJson(record),
              },
            });
            return;
          }
          context.print(renderFields(fields(record, now)));
          context.print(payloadText(record));
        });
      },
    );
}

/** `payloadKind` and `payload`: the stored value itself, or an HTTP response (its body as text or base64). */
function payloadJson(record: IdempotencyRecordView): Record<string, unknown> {
  if (record.payload === undefined) return {};
  const described = describePayload(record.payload);
  switch (described.kind) {
    case 'value':
      return {
        payloadKind: 'value',
        ...(described.value === undefined ? {} : { payload: described.value }),
      };
    case 'http': {
      const { kind: _kind, ...response } = described;
      return { payloadKind: 'http', payload: response };
    }
    case 'not-storable':
      return { payloadKind: 'not-storable', notStorable: described.reason };
  }
}

function fields(record: IdempotencyRecordView, now: Date): Array<[string, string]> {
  return [
    ['scope', record.scope],
    ['key digest', storedKeyDigest(record.scope, record.key)],
    ['state', stateLabel(record, now)],
    ['lease', leaseLabel(record, now)],
    [
      'expires',
      record.state === 'AMBIGUOUS'
        ? 'never: kept until it is resolved'
        : instantWithRelative(record.expiresAt, now),
    ],
    ['created', instantWithRelative(record.createdAt, now)],
    ['age', formatDuration(Math.max(0, now.getTime() - record.createdAt.getTime()))],
    ['completed', record.completedAt ? instantWithRelative(record.completedAt, now) : '-'],
    ['fingerprint', record.fingerprint ?? '-'],
    ...(record.ambiguousSince
      ? ([
          [
            'ambiguous',
            `${instantWithRelative(record.ambiguousSince, now)}, ${record.ambiguousReason}; resolve it: nest-idempotency resolve ${storedKeyDigest(record.scope, record.key)} --completed or --not-executed`,
          ],
        ] as Array<[string, string]>)
      : []),
    ...(record.resolvedBy
      ? ([
          [
            'resolved',
            `by ${record.resolvedBy}${record.resolvedAt ? ` at ${formatInstant(record.resolvedAt)}` : ''}`,
          ],
        ] as Array<[string, string]>)
      : []),
  ];
}

function payloadText(record: IdempotencyRecordView): string {
  if (record.state === 'AMBIGUOUS') return 'payload: none (the outcome of the action is unknown)';
  if (record.state !== 'COMPLETE' || record.payload === undefined)
    return 'payload: none yet (the action has not completed)';
  const payload = describePayload(record.payload);
  if (payload.kind === 'not-storable') {
    return `payload: none: the action ran but its result could not be stored (${payload.reason}); a duplicate is refused`;
  }
  if (payload.kind === 'value') {
    if (payload.value === undefined) return 'payload: undefined (the action returned nothing)';
    return `payload (as stored, after sanitize):\n${JSON.stringify(payload.value, null, 2)}`;
  }
  const headers = Object.entries(payload.headers).map(
    ([name, value]) => `  ${name}: ${String(value)}`,
  );
  return [
    `payload (as stored, after sanitize): HTTP ${payload.status}`,
    ...headers,
    `body (${payload.bodyEncoding}):`,
    payload.body,
  ].join('\n');
}
