import { encodeValue } from '../../core/payload';
import type { StoredPayload } from '../../core/store';
import type { StoredRpcResult } from '../config/idempotency.options';
import type { ModuleSettings } from '../config/module-settings';
import { toPlain } from '../plain-value';

/**
 * A handler's return value as stored, for the doors whose answer is a value
 * (a message handler's reply, a gateway's acknowledgement, a command's or a
 * job's result): JSON, class instances made plain as class-transformer
 * makes them (so fields it excludes are never stored); `sanitize` sees a
 * copy, as `kind: 'rpc'`.
 */
export function storedValue(value: unknown, settings: ModuleSettings): StoredPayload {
  const plain = toPlain(value);
  if (!settings.options.sanitize) return encodeValue(plain);
  const copy: StoredRpcResult = {
    kind: 'rpc',
    value: plain === undefined ? undefined : JSON.parse(JSON.stringify(plain) ?? 'null'),
  };
  return encodeValue((settings.options.sanitize(copy) as StoredRpcResult).value);
}
