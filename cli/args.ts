/**
 * The option parser of every `portcullis` command, on `node:util` parseArgs (strict): each command
 * declares its options (`--name value` and `--name=value` for a string, a flag for a boolean, a
 * list for a repeatable one, `-h` for `--help`), and a UsageError names an unknown option (`--x` or
 * `-x`), a missing value, a value given to a flag or (unless positionals are allowed) an
 * unexpected argument. Owns the conventions every command follows: `--help` / `-h` prints its
 * usage on stdout and exits 0; a UsageError exits 2 with its message and "(npx portcullis <command>
 * --help for the options)" on stderr (npx: it works where portcullis is a project's package, not on PATH); and the value parsers several commands share (a port, a
 * duration, a list's --limit, the one id a command takes). Must never: accept an option the
 * command did not declare.
 */
import { parseArgs } from "node:util";

/** A mistake in how a command was called: its message says what to do instead. */
export class UsageError extends Error {}

/** One declared option: a string (repeatable with `multiple`) or a boolean flag. */
export interface OptionDescriptor {
  readonly type: "string" | "boolean";
  readonly multiple?: boolean;
  readonly short?: string;
}
/** The options of one command, by long name. */
export type OptionSpec = Readonly<Record<string, OptionDescriptor>>;

/** A string option (`--name value`, `--name=value`). */
export const STRING = { type: "string" } as const;
/** A flag: no value. */
export const FLAG = { type: "boolean" } as const;
/** A repeatable string option: every value, in order (an empty list when not given). */
export const REPEATED = { type: "string", multiple: true } as const;
/** `--help` and `-h`: every command takes them. */
export const HELP_OPTION = { help: { type: "boolean", short: "h" } } as const;

type ValueOf<D extends OptionDescriptor> = D["type"] extends "boolean" ? boolean : D extends { multiple: true } ? string[] : string;
type Repeated<O extends OptionSpec> = { [K in keyof O]: O[K] extends { multiple: true } ? K : never }[keyof O];

/** What `parseOptions` gives for spec `O`: each option given (a repeated one always, as a list), and `_`, the positionals. */
export type Options<O extends OptionSpec> = { -readonly [K in Exclude<keyof O, Repeated<O>>]?: ValueOf<O[K]> } & {
  -readonly [K in Repeated<O>]: string[];
} & { _: string[] };

/** `--help`, `-h` or `help` as the only word after a command (group): print its usage. */
export const isHelp = (w: string | undefined): boolean => w === "--help" || w === "-h" || w === "help";

/** The option names of a spec, for the tables help.test.ts reads (its --help must name each one). */
export const namesOf = (spec: OptionSpec): string[] => Object.keys(spec);

/**
 * `argv` parsed for a command whose options are `spec` (strict: anything undeclared is refused).
 * Positionals go to `_`, and are refused unless `positionals`. A UsageError names the first problem.
 */
export function parseOptions<const O extends OptionSpec>(argv: readonly string[], spec: O, { positionals = false } = {}): Options<O> {
  let parsed: { values: Record<string, string | boolean | (string | boolean)[] | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({ args: argv, options: spec, strict: true, allowPositionals: positionals });
  } catch (e) {
    throw new UsageError(usageProblem(argv, spec, positionals) ?? (e instanceof Error ? e.message : String(e)));
  }
  const out: Record<string, unknown> = { ...parsed.values, _: parsed.positionals };
  for (const [name, d] of Object.entries(spec)) if (d.multiple && out[name] === undefined) out[name] = [];
  // parseArgs (strict) gave each declared option its declared type, and nothing else: the shape Options<O> names.
  return out as Options<O>;
}

/**
 * The first problem strict parsing refused, said the CLI's way: "unknown option --x", "--x needs
 * a value", "--x takes no value", "unexpected argument y". Found in parseArgs's own tokens of a
 * lenient parse; undefined when none is found (the caller then shows parseArgs's message).
 */
function usageProblem(argv: readonly string[], spec: OptionSpec, positionals: boolean): string | undefined {
  const { tokens } = parseArgs({ args: argv, options: spec, strict: false, allowPositionals: true, tokens: true });
  for (const t of tokens) {
    if (t.kind === "positional") {
      if (!positionals) return `unexpected argument ${t.value}`;
      continue;
    }
    if (t.kind !== "option") continue;
    const d = Object.hasOwn(spec, t.name) ? spec[t.name] : undefined;
    if (!d) return `unknown option ${t.rawName}`;
    const name = t.rawName.startsWith("--") ? t.rawName : `--${t.name}`;
    if (d.type === "boolean" && t.inlineValue) return `${name} takes no value`;
    // `--x --y`: a lenient parse takes `--y` as the value; strict parsing refuses any value that starts with "-" unless written `--x=-v`.
    if (d.type === "string" && (t.value === undefined || (!t.inlineValue && t.value.length > 1 && t.value.startsWith("-"))))
      return `${name} needs a value${t.value === undefined || t.value.startsWith("--") ? "" : ` (one that starts with "-" is written ${name}=${t.value})`}`;
  }
  return undefined;
}

/** The one positional a command takes (a hold, run or grant id); a UsageError with `message` unless there is exactly one. */
export function oneArgument(a: { _: string[] }, message: string): string {
  const [v] = a._;
  if (a._.length !== 1 || v === undefined) throw new UsageError(message);
  return v;
}

/** A usage mistake in command `name`: its message and the pointer to its --help on stderr, exit 2. */
export function usageError(name: string, message: string): never {
  console.error(`portcullis ${name}: ${message}\n(npx portcullis ${name} --help for the options)`);
  process.exit(2);
}

/**
 * `argv` parsed for command `name` (no positionals): with --help, `help` on stdout and exit 0;
 * a usage mistake exits 2 (usageError). For the commands that print their own usage errors.
 */
export function commandOptions<const O extends OptionSpec>(name: string, argv: readonly string[], spec: O, help: string): Options<O> {
  let a: Options<O>;
  try {
    a = parseOptions(argv, spec);
  } catch (e) {
    if (e instanceof UsageError) usageError(name, e.message);
    throw e;
  }
  if (Object.hasOwn(spec, "help") && (a as { help?: boolean }).help) {
    console.log(help);
    process.exit(0);
  }
  return a;
}

/** `--port`'s value as a port number (1-65535), or `fallback` when not given; a UsageError otherwise. */
export function portArg<F>(v: string | undefined, fallback: F, flag = "--port"): number | F {
  if (v === undefined) return fallback;
  const n = /^\d+$/.test(v) ? Number(v) : Number.NaN;
  if (!(n >= 1 && n <= 65535)) throw new UsageError(`${flag}: use a port number (1-65535), not ${v}`);
  return n;
}

/** `--port`'s value as a port number (1-65535), or `fallback` when not given; a usage error of command `name` otherwise. */
export function portOf(name: string, v: string | undefined, fallback: number, flag = "--port"): number {
  try {
    return portArg(v, fallback, flag);
  } catch (e) {
    if (e instanceof UsageError) usageError(name, e.message);
    throw e;
  }
}

const MS_PER = { ms: 1, s: 1000, m: 60_000 } as const;

/** A duration in ms from `500ms`, `15s` or `2m` (a bare number is seconds), or NaN when it is none. */
export function durationMs(v: string): number {
  const m = /^(\d+)(ms|s|m)?$/.exec(v);
  return m ? Number(m[1]) * MS_PER[(m[2] ?? "s") as keyof typeof MS_PER] : Number.NaN;
}

/** `--timeout` (or `name`): 500ms, 15s, 2m; between `min` and `max` ms; `fallback` when not given. */
export function durationArg(v: string | undefined, fallback: number, name = "--timeout", { min = 100, max = 600_000 } = {}): number {
  if (v === undefined) return fallback;
  const ms = durationMs(v);
  if (!(ms >= min && ms <= max)) throw new UsageError(`${name}: use 500ms, 15s or 2m (between ${min} ms and ${max / 1000} s), not ${v}`);
  return ms;
}

/** `--limit N` of a list: N as given (1-500), or undefined when not given; a UsageError otherwise. */
export function limitArg(v: string | undefined): string | undefined {
  if (v !== undefined && !(/^\d+$/.test(v) && Number(v) >= 1 && Number(v) <= 500)) throw new UsageError("--limit must be a whole number from 1 to 500");
  return v;
}
