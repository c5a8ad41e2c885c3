import { Controller } from '@nestjs/common';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { randomUUID } from 'node:crypto';
import { Idempotent } from 'nest-idempotency';

export const messageRuns = new Map<string, number>();

/** A message handler on Nest's TCP transport: no broker, and @nestjs/microservices is loaded. */
@Controller()
export class PaymentsMessages {
  @MessagePattern('payments.charge')
  @Idempotent({ key: 'data.id' })
  charge(@Payload() data: { id: string; amount: number }) {
    messageRuns.set(data.id, (messageRuns.get(data.id) ?? 0) + 1);
    return { charge: randomUUID(), amount: data.amount };
  }
}
