import { isStepName, MAX_STEP_NAME_LENGTH } from './steps';
import type {
  AcquireRequest,
  Lease,
  ListFilter,
  RecordId,
  RecordState,
  Resolution,
  ResumeRequest,
  Suspension,
} from './store';

/**
 * The SPI's inputs, checked once at a store's boundary. The types say what a
 * store is given; JavaScript callers (and `as` casts) can still hand it
 * `undefined`, `NaN` or a string where a Buffer belongs, and every backend
 * would then do something different with it: a driver bind error, a record
 * written with a broken lease, a process crash. Every built-in store calls
 * these first, so each refuses the same inputs with the same `TypeError`,
 * naming the call and the argument (never echoing a key, scope or tenant:
 * a wrong value is described by its type, a number by its value). A custom
 * store can call them too; the conformance kit checks the behaviour.
 *
 * One normalization: a `fingerprint` left `undefined` means no fingerprint
 * (`null`), as it does for the engine.
 */

const STATES: readonly RecordState[] = ['IN_PROGRESS', 'COMPLETE', 'AMBIGUOUS'];

/** A value as a message may show it: numbers and booleans as they are, anything else by its type. */
export function describeInput(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return String(value);
  }
  if (typeof value === 'string') return `a string (${value.length} characters)`;
  if (Buffer.isBuffer(value)) return 'a Buffer';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') {
    const name = (value as object).constructor?.name;
    return name && name !== 'Object' ? `an instance of ${name}` : 'an object';
  }
  return `a ${typeof value}`;
}

function refuse(where: string, argument: string, expected: string, value: unknown): never {
  throw new TypeError(`${where}: "${argument}" must be ${expected}, got ${describeInput(value)}`);
}

function checkObject(where: string, argument: string, value: unknown): void {
  if (value === null || typeof value !== 'object') refuse(where, argument, 'an object', value);
}

function checkString(where: string, argument: string, value: unknown): void {
  if (typeof value !== 'string') refuse(where, argument, 'a string', value);
}

function checkPositive(where: string, argument: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    refuse(where, argument, 'a positive finite number', value);
  }
}

function checkPositiveInteger(where: string, argument: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    refuse(where, argument, 'a positive whole number', value);
  }
}

/** `{ scope, key }`: both strings. */
export function checkRecordId(id: RecordId, where: string): void {
  checkObject(where, 'id', id);
  checkString(where, 'scope', id.scope);
  checkString(where, 'key', id.key);
}

/**
 * `tryAcquire`'s request: scope and key strings, `leaseMs` and `ttlMs`
 * positive and finite, `waitTimeoutMs` finite and not negative, `fingerprint`
 * a string or null, `onExpiredLease` absent, `steal` or `refuse`. Returns the
 * request to use: the same object, or a copy whose undefined fingerprint is
 * `null`.
 */
export function checkAcquireRequest(request: AcquireRequest, where = 'tryAcquire'): AcquireRequest {
  checkObject(where, 'request', request);
  checkString(where, 'scope', request.scope);
  checkString(where, 'key', request.key);
  checkPositive(where, 'leaseMs', request.leaseMs);
  checkPositive(where, 'ttlMs', request.ttlMs);
  const wait = request.waitTimeoutMs;
  if (typeof wait !== 'number' || !Number.isFinite(wait) || wait < 0) {
    refuse(where, 'waitTimeoutMs', 'a finite number, 0 or more', wait);
  }
  const onExpiredLease = request.onExpiredLease;
  if (onExpiredLease !== undefined && onExpiredLease !== 'steal' && onExpiredLease !== 'refuse') {
    refuse(where, 'onExpiredLease', '"steal", "refuse" or undefined', onExpiredLease);
  }
  const fingerprint = request.fingerprint;
  if (fingerprint === undefined) return { ...request, fingerprint: null };
  if (fingerprint !== null && typeof fingerprint !== 'string') {
    refuse(where, 'fingerprint', 'a string or null', fingerprint);
  }
  return request;
}

/** A stored payload: a Buffer, and nothing else (a string or a plain object would be stored as the driver pleases). */
export function checkPayload(payload: unknown, where: string, argument = 'payload'): void {
  if (!Buffer.isBuffer(payload)) refuse(where, argument, 'a Buffer', payload);
}

/** A lease as `tryAcquire` handed it out: an object with a string `leaseId`. */
/** A step's name: 1–100 letters, digits or `. _ : -` (see ./steps.ts). */
export function checkStepName(name: unknown, where: string): void {
  if (!isStepName(name)) {
    refuse(
      where,
      'name',
      `a step name (1–${MAX_STEP_NAME_LENGTH} letters, digits or . _ : -)`,
      name,
    );
  }
}

export function checkLease(lease: Lease, where: string): void {
  checkObject(where, 'lease', lease);
  checkString(where, 'lease.leaseId', lease.leaseId);
}

/** `list`'s filter: each field absent or of its type; `state` one of the record states. */
export function checkListFilter(filter: ListFilter | undefined, where = 'list'): void {
  if (filter === undefined) return;
  checkObject(where, 'filter', filter);
  if (filter.scope !== undefined) checkString(where, 'scope', filter.scope);
  if (filter.state !== undefined && !STATES.includes(filter.state)) {
    refuse(where, 'state', `one of ${STATES.join(', ')}`, filter.state);
  }
  if (filter.limit !== undefined) checkPositiveInteger(where, 'limit', filter.limit);
}

/** `purgeExpired`'s options: `limit` absent or a positive whole number. */
export function checkPurgeOptions(options: { limit?: number } | undefined, where = 'purgeExpired') {
  if (options === undefined) return;
  checkObject(where, 'options', options);
  if (options.limit !== undefined) checkPositiveInteger(where, 'limit', options.limit);
}

/** Strict mode's `resolve`: the record id, and a resolution of a known outcome. */
export function checkResolution(id: RecordId, resolution: Resolution, where = 'resolve'): void {
  checkRecordId(id, where);
  checkObject(where, 'resolution', resolution);
  checkString(where, 'resolvedBy', resolution.resolvedBy);
  if (resolution.outcome === 'completed') {
    checkPayload(resolution.payload, where);
    checkPositive(where, 'ttlMs', resolution.ttlMs);
  } else if (resolution.outcome !== 'not-executed') {
    refuse(where, 'outcome', '"completed" or "not-executed"', (resolution as Resolution).outcome);
  }
}

/** A continuation id: 1–64 printable ASCII characters, no space (the engine makes them). */
const CONTINUATION = /^[\x21-\x7e]{1,64}$/;
/** A record locator (`recordLocator`): SHA-256 in lowercase hex. */
const LOCATOR = /^[0-9a-f]{64}$/;

function checkContinuation(where: string, value: unknown): void {
  if (typeof value !== 'string' || !CONTINUATION.test(value)) {
    refuse(where, 'continuation', 'a continuation id (1–64 printable characters)', value);
  }
}

/** `continuations.suspend`'s suspension: a continuation id, answer and state Buffers, `holdMs` positive. */
export function checkSuspension(suspension: Suspension, where = 'continuations.suspend'): void {
  checkObject(where, 'suspension', suspension);
  checkContinuation(where, suspension.continuation);
  checkPayload(suspension.answer, where, 'answer');
  checkPayload(suspension.state, where, 'state');
  checkPositive(where, 'holdMs', suspension.holdMs);
}

/**
 * `continuations.resume`'s request: a scope string, a locator as
 * `recordLocator` makes it (64 lowercase hex characters: it names a key, so
 * nothing else is let through), a continuation id, `leaseMs` and `ttlMs`
 * positive and finite.
 */
export function checkResumeRequest(request: ResumeRequest, where = 'continuations.resume'): void {
  checkObject(where, 'request', request);
  checkString(where, 'scope', request.scope);
  if (typeof request.locator !== 'string' || !LOCATOR.test(request.locator)) {
    refuse(where, 'locator', 'a record locator (64 lowercase hex characters)', request.locator);
  }
  checkContinuation(where, request.continuation);
  checkPositive(where, 'leaseMs', request.leaseMs);
  checkPositive(where, 'ttlMs', request.ttlMs);
}
