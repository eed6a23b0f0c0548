/**
 * One bound on waiting: a promise raced against a timer that rejects with NoAnswer ("<what> did
 * not answer within <ms> ms"; callers tell a timeout by its class, never by its text), the timer
 * cleared either way. Every wait on another object of the gateway (the ledger, the kill switch,
 * the stored config) goes through it, so a store that hangs refuses in bounded time instead of
 * holding a call. Must never: swallow the promise's own rejection, or leave its timer running
 * after the race is decided.
 */
/** A wait that ran out of time: who did not answer, and the bound it had. */
export class NoAnswer extends Error {
  readonly kind = "no_answer";
  readonly what: string;
  readonly ms: number;
  constructor(what: string, ms: number) {
    super(`${what} did not answer within ${ms} ms`);
    this.what = what;
    this.ms = ms;
  }
}

export function bounded<T>(p: Promise<T>, ms: number, what = "the ledger"): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new NoAnswer(what, ms)), ms);
  });
  return Promise.race([p, late]).finally(() => {
    if (timer !== undefined) clearTimeout(timer);
  });
}
