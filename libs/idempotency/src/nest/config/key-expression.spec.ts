import { IdempotencyConfigError } from '../../core/errors';
import { compileKeyExpression } from './key-expression';

const ROOTS = ['body', 'data'];
const compile = (source: string) => compileKeyExpression(source, ROOTS, 'OrdersController.create');

/** Every pair of values from a small alphabet rich in what escaping deals with. */
function pairs(alphabet: string[], length: number): [string, string][] {
  const words = [''];
  for (let n = 0; n < length; n++)
    for (const word of [...words]) for (const ch of alphabet) words.push(word + ch);
  const unique = [...new Set(words)];
  return unique.flatMap((a) => unique.map((b): [string, string] => [a, b]));
}

describe('compileKeyExpression: templates', () => {
  it('refuses two values with nothing between them, naming the handler and both paths', () => {
    const refusal = () => compile('{body.a}{body.b}');
    expect(refusal).toThrow(IdempotencyConfigError);
    expect(refusal).toThrow(
      'OrdersController.create: option "key" has an invalid expression "{body.a}{body.b}": {body.a} and {body.b} have nothing between them',
    );
    expect(() => compile('order:{body.a}:{body.b}{body["c d"]}:v1')).toThrow(
      '{body.b} and {body["c d"]} have nothing between them',
    );
  });

  it('refuses text between two values that starts with "%", and allows it after the last one', () => {
    expect(() => compile('{body.a}%{body.b}')).toThrow(
      'the text after {body.a} starts with "%", which starts every escaped character',
    );
    expect(() => compile('{body.a}%25{body.b}')).toThrow(IdempotencyConfigError);
    expect(compile('{body.a}:{body.b}%').evaluate({ body: { a: 'x', b: 'y%' } })).toBe('x:y%25%');
    expect(compile('100%:{body.a}').evaluate({ body: { a: 'x' } })).toBe('100%:x');
  });

  it('is injective for every template it accepts, whatever the values', () => {
    // Separators made of characters that also occur in escapes (hex digits, "%") or in values.
    const templates = [
      'order:{body.a}:{body.b}',
      '{body.a}-{body.b}',
      '{body.a}A{body.b}',
      '{body.a}3A{body.b}',
      '{body.a}:%{body.b}%',
      'p%{body.a}/{body.b}@v2',
    ];
    const values = pairs(['a', ':', '%', '3', 'A', '2', '5', '-', '/', '@'], 2);
    const collisions: string[] = [];
    for (const template of templates) {
      const expression = compile(template);
      const seen = new Map<string, string>();
      for (const [a, b] of values) {
        const key = expression.evaluate({ body: { a, b } }) as string;
        const pair = JSON.stringify([a, b]);
        const other = seen.get(key);
        if (other !== undefined) collisions.push(`${template}: ${other} and ${pair} give ${key}`);
        seen.set(key, pair);
      }
    }
    expect(values.length).toBe(111 * 111);
    expect(collisions).toEqual([]);
  });

  it('keeps the keys of the templates it accepts as they were (records made before stay found)', () => {
    const template = compile('order:{body.customerId}:{body.orderId}');
    expect(template.evaluate({ body: { customerId: '1:2', orderId: '3' } })).toBe('order:1%3A2:3');
    expect(template.evaluate({ body: { customerId: '1', orderId: '2:3' } })).toBe('order:1:2%3A3');
    expect(compile('{body.id}@v2').evaluate({ body: { id: 'v2' } })).toBe('%76%32@v2');
    expect(compile('data.orderId').evaluate({ data: { orderId: 'a:b%' } })).toBe('a:b%');
  });
});
