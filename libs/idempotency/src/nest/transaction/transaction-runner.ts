import { Injectable } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { IdempotencyConfigError } from '../../core/errors';
import { optionalPeer, preloadOptionalPeer } from '../../core/optional-peer';
import type { IdempotencyStore, TransactionRunner } from '../../core/store';
import { withCurrentTransaction } from './idempotency-transaction';

interface ClsTransactionHost {
  withTransaction<T>(fn: () => Promise<T>): Promise<T>;
  readonly tx: unknown;
}

/**
 * Opens the transaction of a `completion: 'transaction'` call. With
 * `@nestjs-cls/transactional` set up in the application, its
 * `TransactionHost.withTransaction` (which joins a transaction already open)
 * and `TransactionHost.tx`; otherwise the store's own transaction. Either way
 * the handler also finds it through `IdempotencyTransaction.manager`.
 */
@Injectable()
export class IdempotencyTransactionRunner {
  private host: ClsTransactionHost | undefined;
  /** Set by `prepare()`; until it settles, a transaction waits for it. */
  private prepared: Promise<void> | undefined;
  private ready = false;

  constructor(private readonly moduleRef: ModuleRef) {}

  /**
   * Finds `@nestjs-cls/transactional`'s host, at bootstrap, once some handler
   * completes in a transaction (the explorer starts it before its first
   * await, so no such call can come before it). Only then: loading
   * nestjs-cls enters its AsyncLocalStorage, which turns on promise hooks
   * that every later promise of the process pays for, used or not.
   */
  prepare(): Promise<void> {
    return (this.prepared ??= preloadOptionalPeer('@nestjs-cls/transactional').then(() => {
      this.host = this.findClsHost();
      this.ready = true;
    }));
  }

  runnerFor(store: IdempotencyStore): TransactionRunner {
    const prepared = this.prepared;
    // A call that came while the host was still being looked for opens its transaction after.
    if (prepared !== undefined && !this.ready)
      return (work) => prepared.then(() => this.runnerFor(store)(work));
    const host = this.host;
    if (host) {
      return (work) =>
        host.withTransaction(() => withCurrentTransaction(host.tx, () => work(host.tx)));
    }
    const transactional = store.transactional;
    if (!transactional) {
      throw new IdempotencyConfigError(
        "completion: 'transaction' needs a store that completes inside a database transaction",
      );
    }
    return (work) => transactional.transaction((tx) => withCurrentTransaction(tx, () => work(tx)));
  }

  private findClsHost(): ClsTransactionHost | undefined {
    let transactional: { TransactionHost: abstract new (...args: never[]) => unknown };
    try {
      transactional = optionalPeer<typeof transactional>('@nestjs-cls/transactional');
    } catch {
      return undefined; // not installed: the store's own transaction
    }
    try {
      return this.moduleRef.get(transactional.TransactionHost, {
        strict: false,
      }) as ClsTransactionHost;
    } catch {
      return undefined; // installed, but no ClsPluginTransactional in this application
    }
  }
}

/** Where a handler's calls complete: in a transaction for `completion: 'transaction'`, else not. */
export function transactionFor(
  plan: { where: string; completion: 'separate' | 'transaction' },
  transactions: IdempotencyTransactionRunner | undefined,
  store: IdempotencyStore,
): TransactionRunner | undefined {
  if (plan.completion !== 'transaction') return undefined;
  if (!transactions) {
    throw new IdempotencyConfigError(
      `${plan.where}: completion: 'transaction' needs IdempotencyModule's transaction runner`,
    );
  }
  return transactions.runnerFor(store);
}
