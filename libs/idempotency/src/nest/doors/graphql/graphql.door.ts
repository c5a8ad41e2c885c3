import type { CallHandler, ExecutionContext } from '@nestjs/common';
import type { GraphQLResolveInfo } from 'graphql';
import { createHash } from 'node:crypto';
import stringify from 'safe-stable-stringify';
import type { CallIdentity, CallOutcome } from '../../../core/lifecycle';
import { encodeValue } from '../../../core/payload';
import type { Refusal } from '../../../core/refusal';
import type { HandlerPlan } from '../../config/handler-plan';
import type { GraphqlKeySource } from '../../config/handler-options';
import { graphqlRefusal } from './graphql-errors';
import { readKeyHeader } from '../http/key-header';
import type { StoredRpcResult } from '../../config/idempotency.options';
import { replayedValue } from '../../replayed-value';
import { Door, invalidKey, keyFromSource, keySourceText } from '../door';
import { captureResult, replayResult } from './graphql-result';

/** What the drivers put in the GraphQL context: `req` always (Apollo, Mercurius), `reply` on Mercurius. */
interface GraphqlRequestContext {
  req?: {
    headers?: Record<string, unknown>;
    rawHeaders?: string[];
    raw?: { rawHeaders?: string[] };
    user?: unknown;
    res?: { setHeader(name: string, value: string): void; getHeader(name: string): unknown };
  };
  reply?: { header(name: string, value: string): unknown; getHeader(name: string): unknown };
}

/**
 * GraphQL `@Mutation()` resolvers (Apollo, Mercurius): the key from the HTTP
 * request's key header or an expression over the arguments, the fingerprint
 * over the mutation's name and arguments, the result as GraphQL sent it (see
 * ./graphql-result.ts), and refusals as GraphQL errors with
 * `extensions.code`. A replay sets `Idempotent-Replayed: true` on the HTTP
 * response where the driver exposes it (Express, Mercurius).
 */
export class GraphqlDoor extends Door {
  protected async serve(
    context: ExecutionContext,
    next: CallHandler,
    plan: HandlerPlan,
  ): Promise<unknown> {
    const [, args, gqlContext, info] = context.getArgs() as [
      unknown,
      Record<string, unknown> | undefined,
      GraphqlRequestContext | undefined,
      GraphQLResolveInfo,
    ];
    const request = gqlContext?.req;
    const source: GraphqlKeySource = {
      type: 'graphql',
      args: args ?? {},
      headers: request?.headers ?? {},
      user: request?.user,
      fieldName: info.fieldName,
      context,
    };
    const sanitize = this.settings.options.sanitize;
    const work = this.work(next, plan, {
      capture: async (value) => ({
        kind: 'stored',
        payload: encodeValue(
          await captureResult(
            value,
            info,
            gqlContext,
            sanitize &&
              ((data) => (sanitize({ kind: 'rpc', value: data }) as StoredRpcResult).value),
          ),
        ),
      }),
    });
    // A resolver that returns an Error is reported by GraphQL as if it threw one: so it counts.
    const invoke = work.invoke.bind(work);
    work.invoke = async (invocation) => {
      const value = await invoke(invocation);
      if (value instanceof Error) throw value;
      return value;
    };
    const outcome = await this.perform(
      plan,
      this.identify(plan, source, gqlContext, info, context),
      work,
    );
    return this.render(outcome, plan, gqlContext, info);
  }

  private render(
    outcome: CallOutcome<unknown>,
    plan: HandlerPlan,
    gqlContext: GraphqlRequestContext | undefined,
    info: GraphQLResolveInfo,
  ): unknown {
    switch (outcome.kind) {
      case 'refused':
        throw this.refusal(outcome.refusal, plan);
      case 'replayed': {
        const replayed = replayedValue(outcome.payload, plan, { typed: true });
        if (replayed.kind === 'error')
          throw graphqlRefusal('idempotency-replayed-error', replayed.message);
        markReplayed(gqlContext);
        return replayResult(replayed.value, info) ?? null;
      }
      case 'executed':
        if (outcome.failure && !plan.observe) throw this.refusal(outcome.failure.refusal, plan);
        return outcome.value;
    }
  }

  private identify(
    plan: HandlerPlan,
    source: GraphqlKeySource,
    gqlContext: GraphqlRequestContext | undefined,
    info: GraphQLResolveInfo,
    context: ExecutionContext,
  ): CallIdentity {
    let key: string | undefined;
    if (plan.key.kind === 'header') {
      const request = gqlContext?.req;
      const header = readKeyHeader(
        request?.rawHeaders ?? request?.raw?.rawHeaders,
        request?.headers ?? {},
        this.settings.keyHeader,
      );
      if (header.kind === 'invalid') return invalidKey(`${plan.where}: ${header.reason}`);
      if (header.kind === 'key') key = header.key;
    } else {
      const found = keyFromSource(plan, source);
      if ('refused' in found) return found.refused;
      key = found.key;
    }
    return this.identity(context, key, () => fingerprintOf(plan, source, info), source.user);
  }

  /** A refusal as a GraphQL error with `extensions.code` (and `retryAfterMs` where a retry can succeed). */
  private refusal(refusal: Refusal, plan: HandlerPlan): Error {
    switch (refusal.code) {
      case 'idempotency-key-missing':
        return graphqlRefusal(
          refusal.code,
          plan.key.kind === 'header'
            ? `${plan.where} requires the ${this.settings.keyHeader} header`
            : `${plan.where}: the mutation has no idempotency key (key: ${keySourceText(plan)})`,
        );
      case 'idempotency-key-invalid':
        return graphqlRefusal(refusal.code, refusal.detail);
      case 'idempotency-in-flight':
        return graphqlRefusal(
          refusal.code,
          'a request with this idempotency key is still being processed',
          refusal.retryAfterMs,
        );
      case 'idempotency-key-reused':
        return graphqlRefusal(
          refusal.code,
          'this idempotency key was already used with different arguments',
        );
      case 'idempotency-store-unavailable':
        return graphqlRefusal(
          refusal.code,
          refusal.detail ?? 'the idempotency store is unavailable; retry later',
          refusal.retryAfterMs,
        );
      case 'idempotency-outcome-unknown':
        return graphqlRefusal(
          refusal.code,
          refusal.detail
            ? `${plan.where}: ${refusal.detail}`
            : `${plan.where}: an earlier request with this idempotency key may have been processed and its outcome is unknown; it is not processed again until the record is resolved`,
        );
      case 'idempotency-result-not-storable':
        return graphqlRefusal(
          refusal.code,
          refusal.detail
            ? `${plan.where}: ${refusal.detail}`
            : `${plan.where}: the mutation was processed, but its result could not be recorded for replay; retrying with this key will not run it again`,
        );
      case 'idempotency-completion-failed':
        return graphqlRefusal(
          refusal.code,
          'the mutation was processed but its outcome could not be recorded',
          1000,
        );
      case 'idempotency-body-too-large':
      case 'idempotency-body-unreadable':
        // HTTP routes only: a GraphQL door never reads a body of its own.
        return graphqlRefusal('idempotency-key-invalid', refusal.detail);
      case 'idempotency-resumption-refused':
        // HTTP routes and the engine only: `resumes` on a mutation fails the bootstrap.
        return graphqlRefusal('idempotency-key-invalid', refusal.error.message);
    }
  }
}

/** SHA-256 of the mutation (parent type and field) and its arguments as canonical JSON. */
function fingerprintOf(
  plan: HandlerPlan,
  source: GraphqlKeySource,
  info: GraphQLResolveInfo,
): string | null {
  if (plan.fingerprint === false) return null;
  if (plan.fingerprint !== 'default') return plan.fingerprint(source) ?? null;
  const text = `graphql\n${info.parentType?.name ?? 'Mutation'}.${info.fieldName}\n${stringify(source.args) ?? ''}`;
  return createHash('sha256').update(text).digest('base64url');
}

/** `Idempotent-Replayed: true` on the HTTP response, where the driver hands it over. */
function markReplayed(gqlContext: GraphqlRequestContext | undefined): void {
  const reply = gqlContext?.reply;
  const res = gqlContext?.req?.res;
  const set = reply
    ? (name: string, value: string) => reply.header(name, value)
    : res
      ? (name: string, value: string) => res.setHeader(name, value)
      : undefined;
  const get = reply
    ? (name: string) => reply.getHeader(name)
    : (name: string) => res?.getHeader(name);
  if (!set) return;
  set('Idempotent-Replayed', 'true');
  // Under CORS a browser only lets a page read the headers listed here.
  if (get('access-control-allow-origin') !== undefined) {
    const exposed = String(get('access-control-expose-headers') ?? '');
    if (!/(^|,)\s*(idempotent-replayed|\*)\s*(,|$)/i.test(exposed)) {
      set(
        'Access-Control-Expose-Headers',
        exposed ? `${exposed}, Idempotent-Replayed` : 'Idempotent-Replayed',
      );
    }
  }
}
