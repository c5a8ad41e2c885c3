/** Plain classes: the Swagger CLI plugin describes their properties (openapi.e2e-spec.ts compiles it). */
export class CreateOrderDto {
  sku!: string;
  quantity!: number;
}

export class OrderDto {
  id!: string;
  sku!: string;
  quantity!: number;
}
