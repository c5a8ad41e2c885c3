import type * as amqp from 'amqplib';
import { EventEmitter } from 'node:events';

/**
 * Every ack and nack any amqplib channel of this process sends, by the
 * message's messageId: the broker client itself, observed (not replaced), so a
 * test can await a settlement instead of racing it. Events are
 * `ack:<id>`, `nack:<id>` and, for nacks, `requeue:<id>` or `dead-letter:<id>`.
 */
export interface Settlements extends EventEmitter {
  /** Every settlement so far, as `<what>:<messageId>`. */
  readonly seen: string[];
}

let observed: Settlements | undefined;

export function observeSettlements(): Settlements {
  if (observed) return observed;
  const emitter = Object.assign(new EventEmitter(), { seen: [] as string[] });
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { Channel } = require('amqplib/lib/channel_model') as {
    Channel: {
      prototype: Record<'ack' | 'nack', (message: amqp.Message, ...rest: unknown[]) => void>;
    };
  };
  for (const method of ['ack', 'nack'] as const) {
    const original = Channel.prototype[method];
    Channel.prototype[method] = function (
      this: unknown,
      message: amqp.Message,
      ...rest: unknown[]
    ) {
      original.call(this, message, ...rest);
      const id = message.properties.messageId;
      emitter.emit(`${method}:${id}`);
      if (method === 'nack') {
        const what = rest[1] !== false ? 'requeue' : 'dead-letter';
        emitter.seen.push(`${what}:${id}`);
        emitter.emit(`${what}:${id}`);
      } else {
        emitter.seen.push(`ack:${id}`);
      }
    };
  }
  observed = emitter;
  return emitter;
}
