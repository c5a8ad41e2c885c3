import type { IdempotencyEngine } from '../../../core/engine';
import { IdempotencyError } from '../../../core/errors';
import type { CallIdentity, CallWork } from '../../../core/lifecycle';
import type { Refusal } from '../../../core/refusal';
import type { KeySource } from '../../config/handler-options';
import type { HandlerPlan } from '../../config/handler-plan';
import type { ModuleSettings } from '../../config/module-settings';
import { replayedValue } from '../../replayed-value';
import {
  type IdempotencyTransactionRunner,
  transactionFor,
} from '../../transaction/transaction-runner';
import { keyFromSource } from '../door';
import { storedValue } from '../stored-value';
import type { ProviderMethodRunner } from './provider-method.registry';
import { refusalError } from './refusal-error';

/** What differs per kind of provider method (a command handler's `execute`, a job processor's `process`…). */
export interface ProviderMethodPort {
  /** The key source one call's arguments make, e.g. `{ type: 'command', command: args[0] }`. */
  keySource(args: readonly unknown[]): KeySource;
  /**
   * The error a refusal is thrown as (default: the core's typed error,
   * `IdempotencyInFlightError` with `retryAfterMs` for a call in flight).
   * `raised`: the typed error the look raised, where it raised one.
   */
  refuse?(refusal: Refusal, plan: HandlerPlan, raised?: Error): Error;
}

/**
 * The door for a provider method that a port describes (a CQRS command
 * handler's `execute`): the binder binds the method's wrapper (see
 * provider-method.registry.ts) to `runner`, which runs each call through the
 * shared lifecycle. A duplicate call resolves with the stored value (as
 * JSON, class instances made plain); a refusal rejects with the port's error.
 */
export class ProviderMethodDoor {
  constructor(
    private readonly engine: IdempotencyEngine,
    private readonly settings: ModuleSettings,
    private readonly transactions?: IdempotencyTransactionRunner,
  ) {}

  /** The runner the method is bound to: `original` called on `instance` through the lifecycle. */
  runner(
    plan: HandlerPlan,
    port: ProviderMethodPort,
    instance: object,
    original: (...args: unknown[]) => unknown,
  ): ProviderMethodRunner {
    return (args) =>
      this.call(plan, port, args, () => Promise.resolve(original.apply(instance, args)));
  }

  /** One call of a provider method through the lifecycle: its value, the stored one, or a refusal thrown. */
  async call(
    plan: HandlerPlan,
    port: ProviderMethodPort,
    args: readonly unknown[],
    invoke: () => Promise<unknown>,
  ): Promise<unknown> {
    const refuse = (refusal: Refusal, raised?: Error) =>
      port.refuse ? port.refuse(refusal, plan, raised) : refusalError(plan.where, refusal, raised);
    const identity = this.identify(plan, port.keySource(args));
    const work: CallWork<unknown> = {
      invoke,
      capture: (value) => ({ kind: 'stored', payload: storedValue(value, this.settings) }),
      transaction: transactionFor(plan, this.transactions, this.engine.store),
    };
    const outcome = await this.engine.perform(
      plan.policy,
      { identity, required: plan.required, observe: plan.observe },
      work,
    );
    switch (outcome.kind) {
      case 'replayed': {
        const replayed = replayedValue(outcome.payload, plan);
        if (replayed.kind === 'error') throw new IdempotencyError(replayed.message);
        return replayed.value;
      }
      case 'refused':
        throw refuse(outcome.refusal, outcome.error);
      case 'executed':
        if (!outcome.failure || plan.observe) return outcome.value;
        throw refuse(outcome.failure.refusal, outcome.failure.error);
    }
  }

  /** No tenant: a provider method has no request to read one from (put it in the key). */
  private identify(plan: HandlerPlan, source: KeySource): CallIdentity {
    const found = keyFromSource(plan, source);
    if ('refused' in found) return found.refused;
    if (found.key === undefined) return { kind: 'absent' };
    const fingerprint =
      typeof plan.fingerprint === 'function' ? (plan.fingerprint(source) ?? null) : null;
    return { kind: 'key', key: found.key, fingerprint };
  }
}
