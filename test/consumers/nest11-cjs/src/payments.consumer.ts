import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload, RmqContext } from '@nestjs/microservices';
import { Idempotent } from 'nest-idempotency';
import { executions } from './payments.controller';

@Controller()
export class PaymentsConsumer {
  @EventPattern('payments.requested')
  @Idempotent({ key: 'message.properties.messageId', waitTimeout: 'PT0S' })
  requested(@Payload() data: { id: string }, @Ctx() context: RmqContext) {
    executions.messages.set(data.id, (executions.messages.get(data.id) ?? 0) + 1);
    context.getChannelRef().ack(context.getMessage());
  }
}
