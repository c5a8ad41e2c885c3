import {
  BadRequestException,
  Body,
  Controller,
  Header,
  HttpCode,
  Param,
  Post,
  Put,
  Res,
} from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { Idempotent } from 'nest-idempotency';
import { Gate } from '../support/gate';

/** Shared between the test and the controller: what ran, and gates to hold handlers mid-flight. */
export class Probe {
  executions = new Map<string, number>();
  gates = new Map<string, { entered: Gate; release: Gate }>();

  count(name: string): number {
    return this.executions.get(name) ?? 0;
  }

  ran(name: string): void {
    this.executions.set(name, this.count(name) + 1);
  }

  hold(name: string): { entered: Gate; release: Gate } {
    const gate = { entered: new Gate(), release: new Gate() };
    this.gates.set(name, gate);
    return gate;
  }

  async pass(name: string): Promise<void> {
    const gate = this.gates.get(name);
    if (!gate) return;
    gate.entered.open();
    await gate.release.promise;
  }
}

export const probe = new Probe();

@Controller('payments')
export class PaymentsController {
  @Post()
  @Idempotent()
  @HttpCode(201)
  @Header('X-Payment-Api', 'v1')
  create(@Body() body: { amount: number }) {
    probe.ran('create');
    // Key order matters: jsonb would store "id" first; a replay must still be byte-identical.
    return { amount: body.amount, id: randomUUID() };
  }

  @Post('accepted')
  @Idempotent()
  @Header('Location', '/payments/queued')
  accepted(
    @Res({ passthrough: true })
    res: {
      status?: (code: number) => unknown;
      code?: (code: number) => unknown;
    },
  ) {
    probe.ran('accepted');
    (res.status ?? res.code)!.call(res, 202);
    return { queued: randomUUID() };
  }

  @Post('slow')
  @Idempotent({ waitTimeout: '10s' })
  async slow(@Body() body: { n: number }) {
    probe.ran('slow');
    await probe.pass('slow');
    return { n: body.n, token: randomUUID() };
  }

  @Post('impatient')
  @Idempotent({ waitTimeout: '200ms', lease: '30s' })
  async impatient() {
    probe.ran('impatient');
    await probe.pass('impatient');
    return { token: randomUUID() };
  }

  @Post('fails')
  @Idempotent()
  fails() {
    probe.ran('fails');
    if (probe.count('fails') === 1) throw new BadRequestException('card declined');
    return { ok: true, attempt: probe.count('fails') };
  }

  @Post('crashes')
  @Idempotent()
  crashes() {
    probe.ran('crashes');
    throw new Error('boom');
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional() {
    probe.ran('optional');
    return { token: randomUUID() };
  }

  @Post('cookie')
  @Idempotent()
  @Header('Set-Cookie', 'session=secret')
  cookie() {
    probe.ran('cookie');
    return { token: randomUUID() };
  }

  @Post('nothing')
  @Idempotent()
  @HttpCode(204)
  nothing() {
    probe.ran('nothing');
  }

  @Post('unstorable')
  @Idempotent()
  unstorable() {
    probe.ran('unstorable');
    return { amount: BigInt(1) };
  }
}

@Controller('orders')
@Idempotent({ key: 'order:{body.customerId}:{params.id}', fingerprint: false })
export class OrdersController {
  @Put(':id')
  put(@Param('id') id: string, @Body() body: { customerId: string }) {
    probe.ran('put');
    return { id, customerId: body.customerId, version: randomUUID() };
  }
}
