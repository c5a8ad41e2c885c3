import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent } from 'nest-idempotency';
import { CreateOrderDto, OrderDto } from './order.dto';

/**
 * No `@ApiResponse` anywhere: the Swagger CLI plugin infers the 201 and its
 * type from the return type. openapi.e2e-spec.ts compiles this file with the
 * plugin, as `nest build` with the plugin enabled would.
 */
@Controller('plugin-orders')
export class OrdersController {
  @Post()
  @Idempotent()
  create(@Body() body: CreateOrderDto): OrderDto {
    return { id: 'o1', ...body };
  }
}
