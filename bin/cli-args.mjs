/**
 * The option parser of every `portcullis` command: `--name value`, `--name=value`, boolean flags,
 * repeatable ones, `-h` for `--help`, and a UsageError naming an unknown option (`--x` or `-x`),
 * a missing value or (unless positionals are allowed) an unexpected argument. The conventions
 * every command follows: `--help` / `-h` prints its usage on stdout and exits 0; a UsageError
 * exits 2 with its message and "(<command> --help for the options)" on stderr.
 * Must never: accept an option the command did not declare.
 */

/** A mistake in how a command was called: its message says what to do instead. */
export class UsageError extends Error {}

/**
 * Options of `argv` for a command that knows `known`; `boolean` flags take no value,
 * `repeatable` ones collect every value in a list. Positionals go to `_` (refused unless `positionals`).
 */
export function parseOptions(argv, { known, boolean = new Set(), repeatable = new Set(), positionals = true }) {
  const out = { _: [] };
  for (const k of repeatable) out[k] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "-h" && known.includes("help")) {
      out.help = true;
      continue;
    }
    if (/^-[^-]/.test(a)) throw new UsageError(`unknown option ${a}`);
    if (!a.startsWith("--")) {
      out._.push(a);
      continue;
    }
    const eq = a.indexOf("=");
    const k = a.slice(2, eq < 0 ? undefined : eq);
    if (!known.includes(k)) throw new UsageError(`unknown option --${k}`);
    let v;
    if (boolean.has(k)) v = true;
    else if (eq >= 0) v = a.slice(eq + 1);
    else if (i + 1 < argv.length && !argv[i + 1].startsWith("--")) v = argv[++i];
    else throw new UsageError(`--${k} needs a value`);
    if (repeatable.has(k)) out[k].push(v);
    else out[k] = v;
  }
  if (!positionals && out._.length) throw new UsageError(`unexpected argument ${out._[0]}`);
  return out;
}
