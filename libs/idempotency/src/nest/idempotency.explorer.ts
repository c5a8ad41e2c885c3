import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModulesContainer, Reflector } from '@nestjs/core';
import { IdempotencyConfigError } from '../core/errors';
import {
  compileHandlerPlan,
  graphqlOperationOf,
  HandlerPlan,
  mergeOptions,
  transportOf,
} from './handler-plan';
import { IdempotentMetadata } from './idempotent.metadata';
import { MODULE_SETTINGS } from './module-settings.provider';
import type { ModuleSettings } from './module-settings';
import { NEST_METADATA } from './nest-metadata';
import { requireGraphql } from './graphql/graphql-errors';
import { preserveKafkaBytes } from './rpc/kafka-bytes';
import { loadMicroservices } from './rpc/microservices';

type ClassRef = { name: string; prototype: object };

/**
 * At bootstrap: finds every `@Idempotent` handler and compiles its plan, so a
 * bad duration, key expression or placement fails the application's start,
 * naming `Class.method`; then prepares the store.
 *
 * Refused at bootstrap: the module configured twice, `@Idempotent` on
 * anything that is not a controller's route or message handler or a
 * resolver's `@Mutation()` (a service, a WebSocket gateway, a query), and two
 * handlers sharing one scope.
 */
@Injectable()
export class IdempotencyExplorer implements OnModuleInit, OnApplicationShutdown {
  /** Per controller class, then per handler function: one function may serve several controllers. */
  private readonly plans = new Map<object, Map<object, HandlerPlan>>();
  private hasMessageHandlers = false;
  private hasGraphqlMutations = false;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly modules: ModulesContainer,
    @Inject(MODULE_SETTINGS) private readonly settings: ModuleSettings,
  ) {}

  async onModuleInit(): Promise<void> {
    this.refuseSecondModule();
    const scopes = new Map<string, string>();
    const claim = (plans: HandlerPlan[], classRef: ClassRef) => {
      for (const plan of plans) {
        const other = scopes.get(plan.policy.scope);
        if (other !== undefined) {
          throw new IdempotencyConfigError(
            `${other} and ${plan.where} would share the idempotency scope "${plan.policy.scope}", so one could replay the other's response; give each its own: @Idempotent({ scope: '…' })${other === plan.where ? ` (two classes are named ${classRef.name}${describeRoute(classRef)})` : ''}`,
          );
        }
        scopes.set(plan.policy.scope, plan.where);
      }
    };
    for (const wrapper of this.discovery.getControllers()) {
      const classRef = wrapper.metatype as ClassRef | undefined;
      if (!classRef || !wrapper.instance) continue;
      claim(this.compileController(classRef), classRef);
    }
    for (const wrapper of this.discovery.getProviders()) {
      const classRef = wrapper.metatype as ClassRef | undefined;
      if (typeof classRef !== 'function' || !wrapper.instance) continue;
      if (Reflect.hasMetadata(NEST_METADATA.graphqlResolver, classRef)) {
        claim(this.compileResolver(classRef), classRef);
      } else {
        this.refuseProvider(classRef);
      }
    }
    // Message handlers: @nestjs/microservices is loaded now (a missing package fails the
    // bootstrap), and Kafka keys keep their bytes. Mutations: graphql, the same way.
    if (this.hasMessageHandlers) {
      await loadMicroservices();
      preserveKafkaBytes();
    }
    if (this.hasGraphqlMutations) await requireGraphql();
    await this.settings.store.init?.();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.settings.store.close?.();
  }

  /** True when some `@Idempotent` handler is a message handler (loads `@nestjs/microservices`). */
  get messageHandlers(): boolean {
    return this.hasMessageHandlers;
  }

  /** The plan for the function Nest calls (`context.getHandler()`) on this controller, if it has one. */
  planFor(classRef: object, handler: object): HandlerPlan | undefined {
    return this.plans.get(classRef)?.get(handler);
  }

  private compileController(classRef: ClassRef): HandlerPlan[] {
    const onClass = this.reflector.get(IdempotentMetadata, classRef as never);
    const out: HandlerPlan[] = [];
    for (const methodName of this.scanner.getAllMethodNames(classRef.prototype)) {
      const handler = (classRef.prototype as Record<string, object>)[methodName];
      const onMethod = this.reflector.get(IdempotentMetadata, handler as never);
      const transport = transportOf(handler);
      if (transport === undefined) {
        if (onMethod) {
          throw new IdempotencyConfigError(
            `${classRef.name}.${methodName}: @Idempotent is on a method that is not a route or message handler, so nothing would protect it; put it on the @Post()/@MessagePattern() handler, or use IdempotencyEngine in plain code`,
          );
        }
        continue;
      }
      const options = mergeOptions(onClass, onMethod);
      if (!options) continue;
      const plan = compileHandlerPlan(classRef, methodName, transport, options, this.settings);
      if (transport === 'rpc') this.hasMessageHandlers = true;
      let plans = this.plans.get(classRef);
      if (!plans) this.plans.set(classRef, (plans = new Map()));
      plans.set(handler, plan);
      out.push(plan);
    }
    return out;
  }

  /**
   * A GraphQL resolver: its `@Mutation()` methods (all of them under a
   * class-level `@Idempotent`); on a query, a subscription or a field
   * resolver it is refused.
   */
  private compileResolver(classRef: ClassRef): HandlerPlan[] {
    const onClass = this.reflector.get(IdempotentMetadata, classRef as never);
    const out: HandlerPlan[] = [];
    for (const methodName of this.scanner.getAllMethodNames(classRef.prototype)) {
      const handler = (classRef.prototype as Record<string, object>)[methodName];
      const onMethod = this.reflector.get(IdempotentMetadata, handler as never);
      const operation = graphqlOperationOf(handler);
      if (operation !== 'Mutation') {
        if (onMethod) {
          throw new IdempotencyConfigError(
            `${classRef.name}.${methodName}: @Idempotent applies to a GraphQL @Mutation(), and this method ${describeResolverMethod(handler, operation)}; put it on the mutation`,
          );
        }
        continue;
      }
      const options = mergeOptions(onClass, onMethod);
      if (!options) continue;
      const plan = compileHandlerPlan(classRef, methodName, 'graphql', options, this.settings);
      this.hasGraphqlMutations = true;
      let plans = this.plans.get(classRef);
      if (!plans) this.plans.set(classRef, (plans = new Map()));
      plans.set(handler, plan);
      out.push(plan);
    }
    return out;
  }

  /** A provider (service, gateway) is never intercepted: `@Idempotent` there would be ignored. */
  private refuseProvider(classRef: ClassRef): void {
    const kind = describeProvider(classRef);
    if (this.reflector.get(IdempotentMetadata, classRef as never)) {
      throw new IdempotencyConfigError(
        `${classRef.name}: @Idempotent is on ${kind}, which Nest does not intercept, so nothing would protect its methods; put it on a controller's route or message handlers, or use IdempotencyEngine in the service`,
      );
    }
    for (const methodName of this.scanner.getAllMethodNames(classRef.prototype)) {
      const handler = (classRef.prototype as Record<string, object>)[methodName];
      if (this.reflector.get(IdempotentMetadata, handler as never)) {
        throw new IdempotencyConfigError(
          `${classRef.name}.${methodName}: @Idempotent is on a method of ${kind}, which Nest does not intercept, so nothing would protect it; put it on a controller's route or message handler, or use IdempotencyEngine in the service`,
        );
      }
    }
  }

  /** Two instances of this module (two `forRoot`s) would run every handler's check twice and deadlock it. */
  private refuseSecondModule(): void {
    const explorers = this.discovery
      .getProviders()
      .filter((wrapper) => wrapper.metatype === IdempotencyExplorer && wrapper.instance);
    if (explorers.length <= 1 || explorers[0].instance !== this) return;
    const hosts = new Set(explorers.map((wrapper) => wrapper.host));
    const importers: string[] = [];
    for (const module of this.modules.values()) {
      for (const imported of module.imports) {
        if (hosts.has(imported)) importers.push(module.metatype?.name ?? 'a module');
      }
    }
    throw new IdempotencyConfigError(
      `IdempotencyModule.forRoot/forRootAsync is configured ${explorers.length} times (imported by ${importers.join(', ') || 'several modules'}); configure it once, in the root module: it is global, so every module's handlers use it`,
    );
  }
}

function describeProvider(classRef: ClassRef): string {
  if (Reflect.hasMetadata(NEST_METADATA.websocketGateway, classRef)) return 'a WebSocket gateway';
  return 'a provider (a service)';
}

function describeResolverMethod(handler: object, operation: string | undefined): string {
  if (operation === 'Query' || operation === 'Subscription')
    return `resolves a ${operation.toLowerCase()}`;
  if (Reflect.getMetadata(NEST_METADATA.graphqlResolveField, handler))
    return operation ? `resolves a field of ${operation}` : 'resolves a field';
  return operation ? `resolves ${operation}` : 'resolves nothing';
}

function describeRoute(classRef: ClassRef): string {
  const path = Reflect.getMetadata(NEST_METADATA.path, classRef) as string | string[] | undefined;
  const version = Reflect.getMetadata(NEST_METADATA.version, classRef) as unknown;
  const parts = [
    path === undefined ? undefined : `path ${JSON.stringify(path)}`,
    version === undefined ? undefined : `version ${JSON.stringify(version)}`,
  ].filter(Boolean);
  return parts.length > 0 ? `, with ${parts.join(' and ')}` : '';
}
