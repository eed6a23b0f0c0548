/**
 * One bound on waiting: a promise raced against a timer that rejects with "<what> did not answer
 * within <ms> ms", the timer cleared either way. Every wait on another object of the gateway (the
 * ledger, the kill switch, the stored config) goes through it, so a store that hangs refuses in
 * bounded time instead of holding a call. Must never: swallow the promise's own rejection, or
 * leave its timer running after the race is decided.
 */
export function bounded<T>(p: Promise<T>, ms: number, what = "the ledger"): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => {
    if (timer !== undefined) clearTimeout(timer);
  });
}
