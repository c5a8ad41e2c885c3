import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { IdempotencyStore } from '../core/store';
import { compileHandlerPlan, HandlerPlan, isHandler, readIdempotentOptions } from './handler-plan';
import { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition';
import type { IdempotencyModuleOptions } from './idempotency.options';

/**
 * At bootstrap: finds every `@Idempotent` handler, compiles its plan (so a bad
 * duration or key expression fails the application's start, naming
 * `Class.method`), and prepares the store.
 */
@Injectable()
export class IdempotencyExplorer implements OnModuleInit, OnApplicationShutdown {
  /** Per controller class, then per handler function: one function may serve several controllers. */
  private readonly plans = new Map<object, Map<object, HandlerPlan | null>>();

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) private readonly options: IdempotencyModuleOptions,
    @Inject(IdempotencyStore) private readonly store: IdempotencyStore,
  ) {}

  async onModuleInit(): Promise<void> {
    for (const wrapper of this.discovery.getControllers()) {
      const instance = wrapper.instance as object | undefined;
      const classRef = wrapper.metatype as { name: string; prototype: object } | undefined;
      if (!instance || !classRef) continue;
      for (const methodName of this.scanner.getAllMethodNames(Object.getPrototypeOf(instance))) {
        this.planFor(classRef, methodName);
      }
    }
    await this.store.init?.();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.store.close?.();
  }

  /** The plan for a handler, compiled on first sight if bootstrap did not see it. */
  planFor(classRef: ClassRef, methodName: string): HandlerPlan | null {
    const handler = (classRef.prototype as Record<string, object>)[methodName];
    const plans = this.plansOf(classRef);
    if (plans.has(handler)) return plans.get(handler)!;
    const decorated = isHandler(handler) ? readIdempotentOptions(classRef, handler) : undefined;
    const plan = decorated
      ? compileHandlerPlan(classRef, methodName, decorated, this.options)
      : null;
    plans.set(handler, plan);
    return plan;
  }

  /**
   * The plan for the function Nest calls (`context.getHandler()`), found by
   * identity rather than by its name, which a wrapping method decorator may change.
   */
  planForHandler(classRef: ClassRef, handler: object): HandlerPlan | null {
    const known = this.plansOf(classRef).get(handler);
    if (known !== undefined) return known;
    const prototype = classRef.prototype as Record<string, unknown>;
    const methodName = this.scanner
      .getAllMethodNames(prototype)
      .find((name) => prototype[name] === handler);
    return methodName === undefined ? null : this.planFor(classRef, methodName);
  }

  private plansOf(classRef: ClassRef): Map<object, HandlerPlan | null> {
    let plans = this.plans.get(classRef);
    if (!plans) this.plans.set(classRef, (plans = new Map()));
    return plans;
  }
}

type ClassRef = { name: string; prototype: object };
