// Names the README's samples allude to without defining: the reader's own code.
import type { DataSource } from 'typeorm';
import type { IdempotencyStore } from 'nest-idempotency';

declare global {
  class PaymentsService {
    charge(body: unknown): Promise<unknown>;
  }
  class FulfilmentService {
    start(order: OrderPlaced): Promise<void>;
  }
  class LedgerService {
    record(payment: PaymentCaptured): Promise<void>;
  }
  const RedisIdempotencyStore: new (client: unknown) => IdempotencyStore;
  const client: { quit(): Promise<unknown> };
  interface CreatePaymentDto {
    amount: number;
  }
  interface OrderPlaced {
    orderId: string;
  }
  interface PaymentCaptured {
    paymentId: string;
  }
  const dataSource: DataSource;
  const store: IdempotencyStore;
  const paymentId: string;
  const gateway: { capture(id: string, options: { signal: AbortSignal }): Promise<unknown> };
  const error: unknown;
}
