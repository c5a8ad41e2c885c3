import { Body, Controller, Post } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Idempotent } from 'nest-idempotency';

export const executions = { http: 0, messages: new Map<string, number>() };

@Controller('payments')
export class PaymentsController {
  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    executions.http++;
    return { id: randomUUID(), amount: body.amount };
  }
}
