import type { IdempotencyEngine } from '../../../core/engine';
import type { IdempotencyLogger } from '../../../core/logger';
import { encodeValue } from '../../../core/payload';
import type { HandlerPlan } from '../../config/handler-plan';
import {
  type IdempotencyTransactionRunner,
  transactionFor,
} from '../../transaction/transaction-runner';
import type { ProviderMethodRunner } from '../provider-methods/provider-method.registry';
import type { CronSchedule } from './cron-schedule';

/**
 * `@Cron` ticks on several instances of one service: each instance's timer
 * fires, and each tick runs on one of them. The key is the tick's scheduled
 * time (ISO 8601, UTC) in the scope of the job (its `name`, else
 * `Class.method`). The instances that lose the race wait, inside the store,
 * until the tick ends or until the next tick is due (a `waitTimeout` option
 * shortens that): one whose holder died takes the tick over when the
 * holder's lease runs out. Nothing is thrown to `@nestjs/schedule`, which
 * would only log it: a tick that ran elsewhere returns quietly, a refusal is
 * one log line.
 */
export class TickDoor {
  constructor(
    private readonly engine: IdempotencyEngine,
    private readonly logger: IdempotencyLogger,
    private readonly transactions: IdempotencyTransactionRunner,
  ) {}

  /** The runner the cron method is bound to: `original` called on `instance` through the lifecycle. */
  runner(
    plan: HandlerPlan,
    schedule: CronSchedule,
    waitTimeoutStated: boolean,
    instance: object,
    original: (...args: unknown[]) => unknown,
  ): ProviderMethodRunner {
    return async (args) => {
      const nowMs = Date.now();
      const scheduledMs = schedule.scheduledAt(nowMs);
      const nextMs = schedule.nextAfter(scheduledMs);
      const policy =
        waitTimeoutStated || nextMs === undefined
          ? plan.policy
          : { ...plan.policy, waitTimeoutMs: Math.max(0, nextMs - nowMs) };
      const outcome = await this.engine.perform(
        policy,
        {
          identity: { kind: 'key', key: new Date(scheduledMs).toISOString(), fingerprint: null },
          required: true,
          observe: plan.observe,
        },
        {
          invoke: () => Promise.resolve(original.apply(instance, args)),
          // A tick's value goes nowhere: the record says only that the tick ran.
          capture: () => ({ kind: 'stored', payload: encodeValue(undefined) }),
          transaction: transactionFor(plan, this.transactions, this.engine.store),
        },
      );
      switch (outcome.kind) {
        case 'executed':
          if (outcome.failure && !plan.observe) {
            this.logger.error(
              `${plan.where}: the tick of ${new Date(scheduledMs).toISOString()} ran, but its record failed (${outcome.failure.refusal.code}): ${outcome.failure.error.message}`,
            );
          }
          return outcome.value;
        case 'replayed':
          return undefined; // another instance ran this tick
        case 'refused':
          if (outcome.refusal.code === 'idempotency-in-flight') return undefined; // still running elsewhere
          this.logger.warn(
            `${plan.where}: the tick of ${new Date(scheduledMs).toISOString()} was not run on this instance (${outcome.refusal.code})${outcome.error ? `: ${outcome.error.message}` : ''}`,
          );
          return undefined;
      }
    };
  }
}
