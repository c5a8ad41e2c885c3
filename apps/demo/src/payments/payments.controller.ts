import { Body, Controller, Get, HttpCode, Inject, Param, Post, Put } from '@nestjs/common';
import { Idempotent } from 'nest-idempotency';
import { DataSource } from 'typeorm';
import { Payment } from './payment.entity';

interface PaymentRequest {
  amount: number;
  currency?: string;
}

@Controller()
export class PaymentsController {
  constructor(@Inject(DataSource) private readonly dataSource: DataSource) {}

  /** Keyed by the `Idempotency-Key` header: a client retry replays the first answer. */
  @Post('payments')
  @Idempotent()
  @HttpCode(201)
  async create(@Body() body: PaymentRequest): Promise<Payment> {
    return this.dataSource.getRepository(Payment).save({
      amount: body.amount,
      currency: body.currency ?? 'EUR',
      orderId: null,
      source: 'http',
    });
  }

  /** Keyed by an expression over the request: paying the same order twice is one payment. */
  @Put('orders/:orderId/payment')
  @Idempotent({ key: 'order:{body.customerId}:{params.orderId}' })
  async payOrder(
    @Param('orderId') orderId: string,
    @Body() body: PaymentRequest & { customerId: string },
  ): Promise<Payment> {
    return this.dataSource.getRepository(Payment).save({
      amount: body.amount,
      currency: body.currency ?? 'EUR',
      orderId,
      source: 'http',
    });
  }

  /** Not idempotent (a read): how many payments exist, to see that duplicates were not charged. */
  @Get('payments')
  async list(): Promise<{ count: number; payments: Payment[] }> {
    const [payments, count] = await this.dataSource
      .getRepository(Payment)
      .findAndCount({ order: { createdAt: 'DESC' }, take: 20 });
    return { count, payments };
  }
}
