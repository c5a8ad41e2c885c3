import { Body, Controller, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Idempotent } from 'nest-idempotency';

export const executions = { count: 0 };

@Controller('payments')
export class PaymentsController {
  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    executions.count++;
    return { id: randomUUID(), amount: body.amount };
  }
}
