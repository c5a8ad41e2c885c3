import { Controller, Inject } from '@nestjs/common';
import { Ctx, EventPattern, Payload, RmqContext } from '@nestjs/microservices';
import { Idempotent } from 'nest-idempotency';
import { DataSource } from 'typeorm';
import { Payment } from './payment.entity';

/**
 * RabbitMQ: a redelivered message (same `messageId`) is taken once. With
 * `noAck: false` the handler acks its own work; the module's `rmq` options ack
 * replays and requeue a message whose twin is still in flight.
 */
@Controller()
export class PaymentsConsumer {
  constructor(@Inject(DataSource) private readonly dataSource: DataSource) {}

  @EventPattern<string>('payments.requested')
  @Idempotent({ key: 'message.properties.messageId', waitTimeout: 'PT0S' })
  async onRequested(
    @Payload() data: { amount: number; currency?: string; orderId?: string },
    @Ctx() context: RmqContext,
  ): Promise<{ paymentId: string }> {
    const payment = await this.dataSource.getRepository(Payment).save({
      amount: data.amount,
      currency: data.currency ?? 'EUR',
      orderId: data.orderId ?? null,
      source: 'amqp',
    });
    context.getChannelRef().ack(context.getMessage());
    return { paymentId: payment.id };
  }
}
