/**
 * What the command groups `portcullis holds|runs|ledger <command>` share beyond parsing options
 * (cli/args.ts) and reaching the gateway (cli/gateway-http.ts): a group's dispatch (its usage on
 * stdout for `--help` / `-h` / `help`, exit 0; its usage on stderr for a missing or unknown
 * command, exit 2; each command run under exitCodeOf's exit codes), a command whose options allow
 * positionals (an id), and the text table their lists print. What each command asks and how it
 * reads the answer stay in its own file. Must never: run a name the group's table does not itself
 * hold (an inherited property such as `constructor`), or exit the process (it returns the code;
 * cli/main.ts exits).
 */
import { isHelp, type Options, type OptionSpec, parseOptions } from "./args.ts";
import { exitCodeOf, messageOf } from "./gateway-http.ts";

/** One command of a group: its words after the command's name; the exit code. */
export type Subcommand = (argv: string[]) => Promise<number>;

/** A command of a group: its options parsed by `spec` (positionals allowed: the id it takes), then run. */
export const subcommand =
  <O extends OptionSpec>(spec: O, run: (a: Options<O>) => Promise<number>): Subcommand =>
  (argv) =>
    run(parseOptions(argv, spec, { positionals: true }));

/**
 * Runs `portcullis <group> <argv…>` (argv: the words after the group's name) with the group's
 * `usage` and `commands`; the exit code. An error exitCodeOf does not map is thrown, unless
 * `unexpected` is given: then its message goes to stderr and that is the exit code.
 */
export async function runGroup(
  group: string,
  usage: string,
  commands: Record<string, Subcommand>,
  argv: string[],
  { unexpected }: { unexpected?: number } = {},
): Promise<number> {
  const [cmd, ...rest] = argv;
  if (isHelp(cmd)) {
    console.log(usage);
    return 0;
  }
  const run = cmd !== undefined && Object.hasOwn(commands, cmd) ? commands[cmd] : undefined;
  if (!run) {
    console.error(`${cmd ? `portcullis ${group}: unknown command ${cmd}\n` : ""}${usage}`);
    return 2;
  }
  const label = `portcullis ${group} ${cmd}`;
  if (unexpected === undefined) return exitCodeOf(label, () => run(rest));
  try {
    return await exitCodeOf(label, () => run(rest));
  } catch (e) {
    console.error(`${label}: ${messageOf(e)}`);
    return unexpected;
  }
}

/** Prints `head` and `rows` as columns on stdout: each as wide as its widest cell plus two, trailing spaces trimmed. */
export function table(head: string[], rows: unknown[][]): void {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)) + 2);
  const line = (r: unknown[]) =>
    r
      .map((c, i) => String(c).padEnd(w[i] ?? 0))
      .join("")
      .trimEnd();
  console.log(line(head));
  for (const r of rows) console.log(line(r));
}
