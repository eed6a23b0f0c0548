/**
 * A config file checked and loaded the way the gateway would take it, for the commands that read
 * one (check, doctor, dev, add, classify, suggest-manifest, reload's rule check): `validate` (the
 * schema, the secrets it names, the policy and each upstream's egress from a given vantage, every
 * problem at once) and `loadGatewayConfig` (loaded with `${NAME}` from this environment, as a live
 * check needs it). The rules themselves are src/'s (config/load.ts, governance/, egress/); this
 * file only feeds them the inlined text. Must never: print a secret value (problems name
 * variables, not values), or call a config sound that src/config/load.ts refused.
 */
import { readFileSync } from "node:fs";
import { ConfigError, loadConfig } from "../src/config/load.ts";
import type { GatewayConfig } from "../src/config/gateway-config.ts";
import { egressProblems } from "../src/egress/config-check.ts";
import { compiledPolicy } from "../src/governance/engine.ts";
import { PolicyError } from "../src/governance/policy-compile.ts";
import { compileCondition } from "../src/governance/policy-cel.ts";
import { UsageError } from "./args.ts";
import { inlineConfigFiles } from "./config-files.ts";
import { codeOf } from "./gateway-http.ts";

/** A validation's verdict: the config (with the inlined `text`) when sound, else every problem. */
export type Validation = { ok: true; text: string; cfg: GatewayConfig } | { ok: false; problems: string[]; text: string };

export interface ValidateOptions {
  /** The gateway serves on 127.0.0.1 (as `dev` does): the egress rules are judged from there. */
  onLoopback?: boolean;
  /** "env": `${NAME}` from this environment; "static": a placeholder for each (the Worker's secrets are not here). */
  secrets?: "env" | "static";
  /** The config's text, when it is not (yet) the file's: `add` validates the result before it writes it. */
  text?: string;
}

/**
 * Validates a config file (or `text`, a config meant for `file`'s place, as `add` does before it
 * writes): schema, secrets named in it, and the egress rules for every upstream from the given
 * vantage (`onLoopback`: the gateway serves on 127.0.0.1, as `dev` does).
 */
export async function validate(file: string, { onLoopback = true, secrets = "env", text: given }: ValidateOptions = {}): Promise<Validation> {
  // `policy: <path>` and `mappings_dir: <dir>` are inlined: the Worker gets one config text.
  const inlined = inlineConfigFiles(given ?? readFileSync(file, "utf8"), file);
  const text = inlined.text;
  if (inlined.problems.length) return { ok: false, problems: inlined.problems, text };
  // Secrets live in the Worker, not here: a static check resolves ${NAME} to a placeholder.
  // PORTCULLIS_ORIGIN is not a secret the config names: the gateway learns it when it starts.
  const vars: Record<string, unknown> =
    secrets === "env" ? { ...process.env } : new Proxy({}, { get: (_t, k) => (typeof k === "string" && k !== "PORTCULLIS_ORIGIN" ? `<${k}>` : undefined) });
  try {
    // The CEL compiler: a config with problems also reports its policy conditions' problems at once.
    const cfg = loadConfig(text, vars, { source: file, conditions: compileCondition });
    try {
      compiledPolicy(cfg);
    } catch (e) {
      if (e instanceof PolicyError) return { ok: false, problems: e.problems, text };
      throw e;
    }
    const problems = egressProblems(cfg, onLoopback);
    return problems.length ? { ok: false, problems, text } : { ok: true, text, cfg };
  } catch (e) {
    if (e instanceof ConfigError) return { ok: false, problems: e.problems, text };
    throw e;
  }
}

/** The config file's text for command `name` (check, doctor, dev); a refusal naming the file (exit 1) when it cannot be read. */
export function configFileText(name: string, file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (e) {
    console.error(`portcullis ${name}: cannot read --config ${file} (${codeOf(e)})`);
    process.exit(1);
  }
}

/** A config that does not load: its message names the file and lists every problem. */
export class ConfigProblem extends Error {
  constructor(file: string, problems: string[]) {
    super(`${file}: invalid\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

/**
 * The config file as the gateway would get it (`policy` and `mappings_dir` inlined) and loaded
 * with `${NAME}` from this environment, and its raw text. Throws ConfigProblem naming every
 * problem, or a UsageError when the file cannot be read.
 */
export async function loadGatewayConfig(file: string): Promise<{ cfg: GatewayConfig; raw: string }> {
  let raw: string;
  try {
    raw = readFileSync(file, "utf8");
  } catch (e) {
    throw new UsageError(`--config: cannot read ${file} (${codeOf(e)})`);
  }
  const inlined = inlineConfigFiles(raw, file);
  if (inlined.problems.length) throw new ConfigProblem(file, inlined.problems);
  // PORTCULLIS_ORIGIN is what the CLI tells a gateway it starts; it has no meaning here.
  const { PORTCULLIS_ORIGIN: _origin, ...vars } = process.env;
  try {
    // Given the CEL compiler, a config with problems reports its policy conditions' problems with them.
    return { cfg: loadConfig(inlined.text, vars, { source: file, conditions: compileCondition }), raw };
  } catch (e) {
    if (e instanceof ConfigError) throw new ConfigProblem(file, e.problems);
    throw e;
  }
}
