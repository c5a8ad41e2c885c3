import { Inject, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { IdempotencyEngine } from '../../../core/engine';
import { IdempotencyConfigError } from '../../../core/errors';
import { optionalPeer } from '../../../core/optional-peer';
import { compileHandlerPlan, mergeOptions } from '../../config/handler-plan';
import type { IdempotentOptions } from '../../config/handler-options';
import { MODULE_SETTINGS } from '../../config/module-settings.provider';
import type { ModuleSettings } from '../../config/module-settings';
import type { ScopeClaim } from '../../config/shared-scopes';
import { forEachMethod } from '../method-wrap';
import { IdempotentMetadata } from '../../idempotent.metadata';
import { NEST_METADATA, SCHEDULER_TYPE } from '../../nest-metadata';
import { IdempotencyTransactionRunner } from '../../transaction/transaction-runner';
import { JobDoor } from '../jobs/job.door';
import { CronOptions, CronSchedule } from '../schedule/cron-schedule';
import { TickDoor } from '../schedule/tick.door';
import { COMMAND_PORT } from '../commands/command.port';
import { ProviderMethodDoor } from './provider-method.door';
import {
  bindProviderMethod,
  isProviderMethodWrapper,
  originalOf,
  ProviderMethodKind,
  providerMethodKind,
} from './provider-method.registry';

type ClassRef = { name: string; prototype: object };

/** What the explorer hands over: one provider, as Nest's discovery found it. */
export interface ProviderFound {
  classRef: ClassRef;
  instance: object;
  /** False for a request-scoped provider (or one that depends on one). */
  isStatic: boolean;
}

/**
 * The doors Nest does not intercept, on providers: a CQRS command handler's
 * `execute(command)`, a BullMQ processor's `process(job)` and `@Cron`
 * methods. At bootstrap, from the explorer, each
 * `@Idempotent` one gets its plan and its instance's method is bound to its
 * door (see provider-method.registry.ts); anything else `@Idempotent` is put
 * on in such a class is refused, naming `Class.method`: `@Interval` and
 * `@Timeout` (no schedule that instances share), other methods (nothing
 * calls them through a door).
 */
@Injectable()
export class ProviderMethodsBinder {
  private readonly commands: ProviderMethodDoor;
  private readonly jobs: JobDoor;
  private readonly ticks: TickDoor;

  constructor(
    engine: IdempotencyEngine,
    @Inject(MODULE_SETTINGS) private readonly settings: ModuleSettings,
    transactions: IdempotencyTransactionRunner,
    private readonly reflector: Reflector,
  ) {
    const logger = settings.logger;
    this.commands = new ProviderMethodDoor(engine, settings, transactions);
    this.jobs = new JobDoor(engine, settings, logger, transactions);
    this.ticks = new TickDoor(engine, logger, transactions);
  }

  /** A command handler, a BullMQ processor, or a provider with `@Cron`, `@Interval` or `@Timeout` methods. */
  handles(classRef: ClassRef): boolean {
    if (Reflect.hasMetadata(NEST_METADATA.cqrsCommandHandler, classRef)) return true;
    if (Reflect.hasMetadata(NEST_METADATA.bullProcessor, classRef)) return true;
    return methodsOf(classRef).some(
      ([, method]) => Reflect.getMetadata(NEST_METADATA.schedulerType, method) !== undefined,
    );
  }

  /** Compiles and binds the provider's `@Idempotent` commands, jobs and ticks; returns their scope claims. */
  bind(found: ProviderFound): ScopeClaim[] {
    const { classRef } = found;
    const onClass = this.reflector.get(IdempotentMetadata, classRef as never);
    const claims: ScopeClaim[] = [];
    for (const [name, method] of methodsOf(classRef)) {
      const where = `${classRef.name}.${name}`;
      const onMethod = this.reflector.get(IdempotentMetadata, method as never);
      const type = Reflect.getMetadata(NEST_METADATA.schedulerType, method) as number | undefined;
      const kind = providerMethodKind(method, classRef, name);
      if (type === SCHEDULER_TYPE.interval || type === SCHEDULER_TYPE.timeout) {
        if (onMethod || onClass) refuseUnscheduled(where, type);
        continue;
      }
      if (!kind) {
        if (onMethod) refuseMethod(classRef, where);
        continue;
      }
      const options = mergeOptions(onClass, onMethod);
      if (!options) continue;
      if (!found.isStatic) refuseRequestScoped(where, kind);
      if (!isProviderMethodWrapper(method)) {
        throw new IdempotencyConfigError(
          `${where}: @Idempotent was applied to this method by hand (its wrapper is missing); use the @Idempotent() decorator`,
        );
      }
      claims.push(this.bindMethod(found, name, method, kind, options));
    }
    return claims;
  }

  private bindMethod(
    found: ProviderFound,
    name: string,
    method: object,
    kind: ProviderMethodKind,
    options: IdempotentOptions,
  ): ScopeClaim {
    const { classRef, instance } = found;
    const where = `${classRef.name}.${name}`;
    const original = originalOf(method as (...args: unknown[]) => unknown);
    if (kind === 'command') {
      const plan = compileHandlerPlan(classRef, name, 'command', options, this.settings);
      bindProviderMethod(
        instance,
        name,
        this.commands.runner(plan, COMMAND_PORT, instance, original),
      );
      return { plan, explicit: options.scope !== undefined, route: '' };
    }
    if (kind === 'job') {
      requirePeer('bullmq', where, 'a BullMQ processor');
      const plan = compileHandlerPlan(classRef, name, 'job', options, this.settings);
      bindProviderMethod(instance, name, this.jobs.runner(plan, instance, original));
      return { plan, explicit: options.scope !== undefined, route: '' };
    }
    requirePeer('cron', where, 'a @Cron method (cron is installed with @nestjs/schedule)');
    const cron = Reflect.getMetadata(NEST_METADATA.cronOptions, method) as CronOptions;
    const named = options.scope ?? cron.name;
    const plan = compileHandlerPlan(
      classRef,
      name,
      'tick',
      { ...options, scope: named },
      this.settings,
    );
    const schedule = new CronSchedule(cron, where);
    const waitTimeoutStated = options.waitTimeout !== undefined;
    bindProviderMethod(
      instance,
      name,
      this.ticks.runner(plan, schedule, waitTimeoutStated, instance, original),
    );
    return { plan, explicit: named !== undefined, route: '' };
  }
}

function refuseMethod(classRef: ClassRef, where: string): never {
  if (Reflect.hasMetadata(NEST_METADATA.cqrsCommandHandler, classRef)) {
    throw new IdempotencyConfigError(
      `${where}: @Idempotent on a command handler applies to its execute(command), which CommandBus.execute calls; put it there`,
    );
  }
  throw new IdempotencyConfigError(
    `${where}: @Idempotent is on a method that is neither a BullMQ processor's process() nor a @Cron method, and Nest does not intercept a provider's methods, so nothing would protect it; put it on process() or the @Cron method, or use IdempotencyEngine in the service`,
  );
}

function refuseRequestScoped(where: string, kind: ProviderMethodKind): never {
  if (kind === 'command') {
    throw new IdempotencyConfigError(
      `${where}: @Idempotent cannot protect a request-scoped command handler (made anew for each command); make it a singleton`,
    );
  }
  throw new IdempotencyConfigError(
    `${where}: @Idempotent is on a request-scoped provider, whose instances are made per call; make the ${kind === 'job' ? 'processor' : 'service'} a singleton (the default scope)`,
  );
}

function refuseUnscheduled(where: string, type: number): never {
  const decorator = type === SCHEDULER_TYPE.interval ? '@Interval' : '@Timeout';
  throw new IdempotencyConfigError(
    `${where}: @Idempotent cannot make a ${decorator} method run once across instances: its timer starts when each instance starts, so the instances share no schedule that would name a run; use @Cron, whose ticks every instance schedules at the same times`,
  );
}

function requirePeer(name: 'bullmq' | 'cron', where: string, what: string): void {
  try {
    optionalPeer(name);
  } catch (error) {
    throw new IdempotencyConfigError(
      `${where}: @Idempotent on ${what} needs ${name}, which could not be loaded: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/** The class's methods by name, inherited ones included (the nearest definition wins). */
function methodsOf(classRef: ClassRef): [string, object][] {
  const out: [string, object][] = [];
  forEachMethod(classRef, (name, method) => out.push([name, method]));
  return out;
}
