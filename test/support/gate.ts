/** A promise the test resolves by hand: lets a handler be held mid-flight without sleeping. */
export class Gate<T = void> {
  readonly promise: Promise<T>;
  open!: (value: T) => void;
  constructor() {
    this.promise = new Promise<T>((resolve) => (this.open = resolve));
  }
}
