import { Inject, Injectable, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModulesContainer, Reflector } from '@nestjs/core';
import { IdempotencyConfigError } from '../core/errors';
import {
  compileHandlerPlan,
  graphqlOperationOf,
  HandlerPlan,
  mergeOptions,
  Transport,
  transportOf,
} from './config/handler-plan';
import { IdempotentMetadata } from './idempotent.metadata';
import { MODULE_SETTINGS } from './config/module-settings.provider';
import type { ModuleSettings } from './config/module-settings';
import { NEST_METADATA } from './nest-metadata';
import { IdempotencyTransactionRunner } from './transaction/transaction-runner';
import { keySourceText } from './doors/door';
import { requireGraphql } from './doors/graphql/graphql-errors';
import { ScopeClaim, settleSharedScopes } from './config/shared-scopes';
import { preserveKafkaBytes } from './doors/messages/kafka-bytes';
import { microservices } from './doors/messages/microservices';
import { recordRmqConsumerAck } from './doors/messages/rmq-settlement';
import { websockets } from './doors/gateway/websockets';
import { ProviderMethodsBinder } from './doors/provider-methods/provider-methods.binder';
import { settleAsPlain } from './doors/provider-methods/provider-method.registry';

type ClassRef = { name: string; prototype: object };

/**
 * At bootstrap: finds every `@Idempotent` handler and compiles its plan, so a
 * bad duration, key expression or placement fails the application's start,
 * naming `Class.method`; then prepares the store.
 *
 * A CQRS command handler's `execute`, a BullMQ processor's `process` and a
 * `@Cron` method, which Nest does not intercept, are bound to their doors
 * instead (doors/provider-methods); the handlers Nest does intercept have
 * their provider-method wrappers settled as plain calls.
 *
 * Refused at bootstrap: the module configured twice, `@Idempotent` on
 * anything that is not a controller's route or message handler, a
 * resolver's `@Mutation()`, a gateway's `@SubscribeMessage` handler, a
 * command handler's `execute`, a BullMQ processor's `process` or a `@Cron`
 * method (a service, a query; `@Interval`, `@Timeout`), and two handlers
 * sharing one scope unless they name it on purpose (see shared-scopes.ts).
 */
@Injectable()
export class IdempotencyExplorer implements OnModuleInit, OnApplicationShutdown {
  /** Per controller class, then per handler function: one function may serve several controllers. */
  private readonly plans = new Map<object, Map<object, HandlerPlan>>();
  private hasMessageHandlers = false;
  private hasGraphqlMutations = false;
  private hasGatewayHandlers = false;
  /** Settles when `onModuleInit` has compiled every plan and prepared the store (see `whenCompiled`). */
  private readonly compiled = settlement();

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly reflector: Reflector,
    private readonly modules: ModulesContainer,
    @Inject(MODULE_SETTINGS) private readonly settings: ModuleSettings,
    private readonly providerMethods: ProviderMethodsBinder,
    private readonly transactions: IdempotencyTransactionRunner,
  ) {}

  async onModuleInit(): Promise<void> {
    try {
      await this.compile();
      this.compiled.resolve();
    } catch (error) {
      this.compiled.reject(error);
      throw error;
    }
  }

  /** True once every plan is compiled: before, `planFor` knows none. */
  get isCompiled(): boolean {
    return this.compiled.settled;
  }

  /**
   * Resolves once every plan is compiled. A hybrid application's
   * `startAllMicroservices()` starts its listeners before the modules' init
   * hooks run (they run in `app.init()` or `app.listen()`), so a message may
   * arrive first; it waits here, at most `withinMs`, instead of running
   * unprotected.
   */
  whenCompiled(where: string, withinMs: number): Promise<void> {
    if (this.compiled.settled) return this.compiled.promise;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new IdempotencyConfigError(
              `${where} was called ${withinMs} ms before IdempotencyModule had initialised, and it still has not: the application's init hooks have not run (a hybrid application starts its microservices' listeners in startAllMicroservices(), its init hooks in app.init() or app.listen(); call one of them)`,
            ),
          ),
        withinMs,
      );
    });
    return Promise.race([this.compiled.promise, late]).finally(() => clearTimeout(timer));
  }

  private async compile(): Promise<void> {
    this.refuseSecondModule();
    const claims: ScopeClaim[] = [];
    for (const wrapper of this.discovery.getControllers()) {
      const classRef = wrapper.metatype as ClassRef | undefined;
      if (!classRef || !wrapper.instance) continue;
      claims.push(...this.compileController(classRef));
    }
    for (const wrapper of this.discovery.getProviders()) {
      const classRef = wrapper.metatype as ClassRef | undefined;
      if (typeof classRef !== 'function' || !wrapper.instance) continue;
      if (Reflect.hasMetadata(NEST_METADATA.graphqlResolver, classRef)) {
        claims.push(...this.compileResolver(classRef));
      } else if (Reflect.hasMetadata(NEST_METADATA.websocketGateway, classRef)) {
        claims.push(...this.compileController(classRef, gatewayTransportOf));
      } else if (this.providerMethods.handles(classRef)) {
        const isStatic = wrapper.isDependencyTreeStatic();
        claims.push(
          ...this.providerMethods.bind({ classRef, instance: wrapper.instance, isStatic }),
        );
      } else {
        this.refuseProvider(classRef);
      }
    }
    settleSharedScopes(claims);
    for (const claim of claims) this.warnSharedKey(claim.plan);
    // Started before the first await: a transaction that comes meanwhile waits for it.
    const transactionsPrepared = claims.some((claim) => claim.plan.completion === 'transaction')
      ? this.transactions.prepare()
      : undefined;
    // Message handlers: @nestjs/microservices is loaded now (a missing package fails the
    // bootstrap), Kafka keys keep their bytes, and RabbitMQ deliveries say their consumer's noAck. Mutations: graphql, the same way.
    if (this.hasMessageHandlers) {
      await microservices.load();
      preserveKafkaBytes();
      recordRmqConsumerAck();
    }
    if (this.hasGraphqlMutations) await requireGraphql();
    await transactionsPrepared;
    if (this.hasGatewayHandlers) await websockets.load();
    await this.settings.store.init?.();
    // Receipts on: their tables must be there (SQL), or the bootstrap fails naming the migration.
    if (this.settings.options.receipts) await this.settings.store.receipts?.check();
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

  /** A controller's routes and message handlers, or (`transportOf` for gateways) a gateway's `@SubscribeMessage` handlers. */
  private compileController(
    classRef: ClassRef,
    transportOf: (handler: object) => Transport | undefined = controllerTransportOf,
  ): ScopeClaim[] {
    const onClass = this.reflector.get(IdempotentMetadata, classRef as never);
    const out: ScopeClaim[] = [];
    for (const methodName of this.scanner.getAllMethodNames(classRef.prototype)) {
      const handler = (classRef.prototype as Record<string, object>)[methodName];
      const onMethod = this.reflector.get(IdempotentMetadata, handler as never);
      const transport = transportOf(handler);
      if (transport === undefined) {
        if (onMethod) {
          throw new IdempotencyConfigError(
            transportOf === gatewayTransportOf
              ? `${classRef.name}.${methodName}: @Idempotent is on a method of a WebSocket gateway that is not a @SubscribeMessage handler, so nothing would protect it; put it on the @SubscribeMessage() handler`
              : `${classRef.name}.${methodName}: @Idempotent is on a method that is not a route or message handler, so nothing would protect it; put it on the @Post()/@MessagePattern() handler, or use IdempotencyEngine in plain code`,
          );
        }
        continue;
      }
      const options = mergeOptions(onClass, onMethod);
      if (!options) continue;
      const plan = compileHandlerPlan(classRef, methodName, transport, options, this.settings);
      if (transport === 'rpc') this.hasMessageHandlers = true;
      if (transport === 'ws') this.hasGatewayHandlers = true;
      let plans = this.plans.get(classRef);
      if (!plans) this.plans.set(classRef, (plans = new Map()));
      plans.set(handler, plan);
      settleAsPlain(handler);
      out.push({ plan, explicit: options.scope !== undefined, route: describeRoute(classRef) });
    }
    return out;
  }

  /**
   * A GraphQL resolver: its `@Mutation()` methods (all of them under a
   * class-level `@Idempotent`); on a query, a subscription or a field
   * resolver it is refused.
   */
  private compileResolver(classRef: ClassRef): ScopeClaim[] {
    const onClass = this.reflector.get(IdempotentMetadata, classRef as never);
    const out: ScopeClaim[] = [];
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
      settleAsPlain(handler);
      const name = Reflect.getMetadata(NEST_METADATA.graphqlResolverName, handler) as unknown;
      out.push({
        plan,
        explicit: options.scope !== undefined,
        route: '',
        mutation: typeof name === 'string' ? name : methodName,
      });
    }
    return out;
  }

  /** `@Idempotent` on any other provider (a service), which Nest never intercepts: it would be ignored. */
  private refuseProvider(classRef: ClassRef): void {
    if (this.reflector.get(IdempotentMetadata, classRef as never)) {
      throw new IdempotencyConfigError(
        `${classRef.name}: @Idempotent is on a provider (a service), which Nest does not intercept, so nothing would protect its methods; put it on a controller's route or message handlers, or use IdempotencyEngine in the service`,
      );
    }
    for (const methodName of this.scanner.getAllMethodNames(classRef.prototype)) {
      const handler = (classRef.prototype as Record<string, object>)[methodName];
      if (this.reflector.get(IdempotentMetadata, handler as never)) {
        throw new IdempotencyConfigError(
          `${classRef.name}.${methodName}: @Idempotent is on a method of a provider (a service), which Nest does not intercept, so nothing would protect it; put it on a controller's route or message handler, or use IdempotencyEngine in the service`,
        );
      }
    }
  }

  /**
   * A key taken from the request (a template, a function) is likely to be
   * sent by two callers (two customers' order 42). Without a `tenant` option
   * their records are told apart only by `request.user`'s `id` or `sub`, when
   * a guard sets one; said once per handler, at bootstrap.
   */
  private warnSharedKey(plan: HandlerPlan): void {
    if (plan.transport !== 'http' && plan.transport !== 'graphql' && plan.transport !== 'ws')
      return;
    if (plan.key.kind === 'header') return;
    if (this.settings.options.tenant !== undefined) return;
    this.settings.logger.warn(
      `${plan.where}: its key comes from the request (key: ${keySourceText(plan)}), and no tenant option says whose records are whose; a request whose request.user has no id or sub shares its record with every caller who sends the same key. Set tenant (a function of the ExecutionContext), or tenant: false to share records on purpose`,
    );
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

const controllerTransportOf = transportOf;

/** A gateway's `@SubscribeMessage` handler. */
function gatewayTransportOf(handler: object): Transport | undefined {
  return Reflect.hasMetadata(NEST_METADATA.websocketMessage, handler) ? 'ws' : undefined;
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

/** A promise settled from outside, which says whether it has been. */
function settlement(): {
  promise: Promise<void>;
  settled: boolean;
  resolve(): void;
  reject(error: unknown): void;
} {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => undefined); // a failed bootstrap is reported by Nest; nobody may be waiting
  const state = {
    promise,
    settled: false,
    resolve: () => {
      state.settled = true;
      resolve();
    },
    reject: (error: unknown) => {
      state.settled = true;
      reject(error);
    },
  };
  return state;
}
