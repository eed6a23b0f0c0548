/**
 * The dispatch of `portcullis classify` (cli/classify.ts) and `portcullis suggest-manifest`
 * (cli/suggest-manifest.ts): each command's options parsed by its own spec, and what a usage
 * mistake or a config that does not load exits with (2, with the reason; a `${NAME}` the config
 * names but this environment lacks is said so). Must never: print a secret value (a config problem
 * names the variable, not its value).
 */
import { namesOf, parseOptions, UsageError } from "./args.ts";
import { CLASSIFY_OPTIONS, classifyCommand } from "./classify.ts";
import { SUGGEST_OPTIONS, suggestCommand } from "./suggest-manifest.ts";
import { ConfigProblem } from "./validate.ts";

/** The options of each command (help.test.ts checks each --help names them all). */
export const KNOWN = { classify: namesOf(CLASSIFY_OPTIONS), "suggest-manifest": namesOf(SUGGEST_OPTIONS) };

const COMMANDS: Record<string, (argv: string[]) => Promise<number>> = {
  classify: (argv) => classifyCommand(parseOptions(argv, CLASSIFY_OPTIONS)),
  "suggest-manifest": (argv) => suggestCommand(parseOptions(argv, SUGGEST_OPTIONS)),
};

/** Runs `portcullis <cmd> <argv…>` for `classify` and `suggest-manifest`; the exit code. */
export async function governanceCommand(cmd: string, argv: string[]): Promise<number> {
  const run = Object.hasOwn(COMMANDS, cmd) ? COMMANDS[cmd] : undefined;
  if (!run) {
    console.error(`portcullis: unknown command ${cmd}`);
    return 2;
  }
  try {
    return await run(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`portcullis ${cmd}: ${e.message}\n(npx portcullis ${cmd} --help for the options)`);
      return 2;
    }
    if (e instanceof ConfigProblem) {
      const unset = /is not set as a Worker secret or var/.test(e.message) ? `\n(this command reads each \${NAME} from its own environment: set it there)` : "";
      console.error(`portcullis ${cmd}: ${e.message}${unset}`);
      return 2;
    }
    throw e;
  }
}
