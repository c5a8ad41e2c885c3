import { IdempotencyConfigError } from '../../core/errors';
import type { HandlerPlan } from './handler-plan';

/** One handler's claim on its scope, as the explorer found it at bootstrap. */
export interface ScopeClaim {
  plan: HandlerPlan;
  /** The handler's options (method or class) name the scope; otherwise it is the default `Class.method`. */
  explicit: boolean;
  /** `, with path "…" and version "…"`: tells apart two classes of one name in a message. */
  route: string;
  /** GraphQL: the mutation's name, which its default fingerprint hashes. */
  mutation?: string;
}

/**
 * Several handlers may share a scope on purpose: one command arriving
 * through several doors (an HTTP route and a Kafka or RabbitMQ handler; a
 * route that fails fast and one that waits), where a key must run once
 * whichever door it used. Only an explicit `scope` shares: two handlers
 * whose default `Class.method` scopes collide (two classes of one name) are
 * refused, as is an explicit scope that is another handler's default. So
 * are doors whose options would break the shared record: strict mode on one
 * and not the other, and fingerprints that can never match.
 *
 * Routes that share a scope with another route with the default fingerprint
 * get its `shared-scope` form (their methods and paths differ).
 */
export function settleSharedScopes(claims: readonly ScopeClaim[]): void {
  const byScope = new Map<string, ScopeClaim[]>();
  for (const claim of claims) {
    const group = byScope.get(claim.plan.policy.scope);
    if (group) group.push(claim);
    else byScope.set(claim.plan.policy.scope, [claim]);
  }
  for (const [scope, group] of byScope) {
    if (group.length < 2) continue;
    refuseDefaultScope(scope, group);
    refuseMixedStrictness(scope, group);
    refuseIncomparableFingerprints(scope, group);
    const routes = group.filter((claim) => fingerprintOf(claim).kind === 'http');
    if (routes.length > 1) for (const { plan } of routes) plan.fingerprintForm = 'shared-scope';
  }
}

function refuseDefaultScope(scope: string, group: ScopeClaim[]): void {
  const defaulted = group.find((claim) => !claim.explicit);
  if (!defaulted) return;
  const other = group.find((claim) => claim !== defaulted)!;
  const [first, second] =
    group.indexOf(defaulted) < group.indexOf(other) ? [defaulted, other] : [other, defaulted];
  if (other.explicit) {
    throw new IdempotencyConfigError(
      `${first.plan.where} and ${second.plan.where} would share the idempotency scope "${scope}", which is ${defaulted.plan.where}'s default (Class.method), so one could replay the other's response; to share records on purpose, give both the same explicit scope, @Idempotent({ scope: '…' }); otherwise give ${other.plan.where} another`,
    );
  }
  throw new IdempotencyConfigError(
    `${first.plan.where} and ${second.plan.where} would share the idempotency scope "${scope}", so one could replay the other's response; give each its own: @Idempotent({ scope: '…' })${
      first.plan.where === second.plan.where
        ? ` (two classes are named ${second.plan.where.split('.')[0]}${second.route})`
        : ''
    }`,
  );
}

/**
 * A strict door never runs a key again once a lease ran out (the record
 * becomes AMBIGUOUS); a door that steals expired leases would take such a
 * record over and run it again.
 */
function refuseMixedStrictness(scope: string, group: ScopeClaim[]): void {
  const strict = group.find((claim) => claim.plan.policy.strict);
  const loose = group.find((claim) => !claim.plan.policy.strict);
  if (!strict || !loose) return;
  throw new IdempotencyConfigError(
    `${strict.plan.where} and ${loose.plan.where} share the idempotency scope "${scope}", but ${strict.plan.where} is in strict mode (onExpiredLease: 'refuse') and ${loose.plan.where} is not${
      loose.plan.observe ? ' (observe mode never is)' : ''
    }: a record whose lease ran out, which strict mode never runs again, would be taken over and run again through ${loose.plan.where}; give them the same onExpiredLease and mode, or each its own scope`,
  );
}

type FingerprintKind =
  | { kind: 'none' }
  | { kind: 'function' }
  | { kind: 'http' }
  | { kind: 'graphql'; mutation: string };

/** What a door's fingerprint is made of; two doors' fingerprints can only match when they are made alike. */
function fingerprintOf(claim: ScopeClaim): FingerprintKind {
  const { plan } = claim;
  if (plan.fingerprint === false) return { kind: 'none' };
  if (typeof plan.fingerprint === 'function') return { kind: 'function' };
  switch (plan.transport) {
    case 'rpc':
    case 'ws':
    case 'command':
    case 'job':
    case 'tick':
      return { kind: 'none' };
    case 'http':
      return { kind: 'http' };
    case 'graphql':
      return { kind: 'graphql', mutation: claim.mutation ?? plan.where };
    default: {
      const unknown: never = plan.transport;
      throw new Error(`unknown transport ${String(unknown)}`);
    }
  }
}

function describeFingerprint(fingerprint: FingerprintKind): string {
  switch (fingerprint.kind) {
    case 'none':
      return 'no fingerprint';
    case 'function':
      return 'a fingerprint function';
    case 'http':
      return 'the default HTTP fingerprint';
    case 'graphql':
      return `the default GraphQL fingerprint, which names the mutation ${fingerprint.mutation}`;
  }
}

/**
 * A fingerprint that only one door has is not compared (the store compares
 * two fingerprints only when both sides carry one). Two that both doors
 * carry must be able to match: routes' default fingerprints do (in their
 * shared-scope form), fingerprint functions are the application's to agree;
 * anything else would answer every key that changed doors with 422.
 */
function refuseIncomparableFingerprints(scope: string, group: ScopeClaim[]): void {
  const carrying = group
    .map((claim) => ({ claim, fingerprint: fingerprintOf(claim) }))
    .filter(({ fingerprint }) => fingerprint.kind !== 'none');
  const [first] = carrying;
  for (const other of carrying.slice(1)) {
    const a = first.fingerprint;
    const b = other.fingerprint;
    const alike =
      a.kind === b.kind && (a.kind !== 'graphql' || a.mutation === (b as typeof a).mutation);
    if (alike) continue;
    throw new IdempotencyConfigError(
      `${first.claim.plan.where} and ${other.claim.plan.where} share the idempotency scope "${scope}", but their fingerprints can never match (${first.claim.plan.where}: ${describeFingerprint(a)}; ${other.claim.plan.where}: ${describeFingerprint(b)}), so a key used through one would be refused as reused through the other; give both the same fingerprint function, or fingerprint: false to one of them`,
    );
  }
}
