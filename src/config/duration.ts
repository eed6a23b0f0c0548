/**
 * Durations as the config writes them: a number of milliseconds, or `<n>ms|s|m|h`. Owns the one
 * parser every config module uses (the schemas validate the spelling first). Must never: throw.
 */

/** Milliseconds of `v`; `fallback` when it is absent or not a duration. */
export function durationMs(v: number | string | undefined, fallback: number): number {
  if (v === undefined) return fallback;
  if (typeof v === "number") return v;
  const m = /^(\d+)(ms|s|m|h)$/.exec(v);
  if (!m) return fallback;
  const n = Number(m[1]);
  return m[2] === "ms" ? n : m[2] === "s" ? n * 1000 : m[2] === "m" ? n * 60_000 : n * 3_600_000;
}
