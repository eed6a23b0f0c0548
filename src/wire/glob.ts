/**
 * Glob matching over names: `*` matches any run of characters, `?` one character, everything
 * else literally. Owns the compiled-pattern cache. Must never: treat a name as a pattern.
 */
const compiled = new Map<string, RegExp>();

/** Whether `name` matches `glob`. Patterns are compiled once per isolate. */
export function globMatch(glob: string, name: string): boolean {
  let re = compiled.get(glob);
  if (!re) {
    re = new RegExp(
      `^${glob
        .replace(/[.+^${}()|[\]\\]/g, "\\$&")
        .replace(/\*/g, ".*")
        .replace(/\?/g, ".")}$`,
    );
    if (compiled.size > 4096) compiled.clear();
    compiled.set(glob, re);
  }
  return re.test(name);
}
