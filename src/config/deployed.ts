/**
 * The config a deploy brought: the PORTCULLIS_CONFIG var when one is set (`portcullis dev` in
 * this repository, or an operator's own var), else the config built into the bundle (a gateway
 * project's entry hands its built config module to `gateway()`, src/worker.ts, at load). A
 * built config has no size limit of its own (a Worker var holds at most 5 KB); it is the text
 * `portcullis build` wrote, with `policy:` and `mappings_dir` inlined. Owns that choice alone.
 * Must never: parse or log the text, or let a built config replace a var that is set.
 */

let built: string | undefined;

/** Called once by the entry of a gateway project (src/worker.ts `gateway`) with the config built into its bundle. */
export function useBuiltConfig(text: string): void {
  if (typeof text !== "string" || text.trim() === "") throw new Error("the built config is empty: run `npx portcullis build` (dev and deploy run it)");
  built = text;
}

/** The deployed config's text: the PORTCULLIS_CONFIG var when set, else the built one; undefined when neither is there. */
export function deployedConfigText(env: { PORTCULLIS_CONFIG?: unknown }): string | undefined {
  const v = env.PORTCULLIS_CONFIG;
  if (typeof v === "string" && v.trim() !== "") return v;
  return built;
}

/** Where the deployed config came from, for messages: the var, the bundle, or nowhere. */
export function deployedConfigSource(env: { PORTCULLIS_CONFIG?: unknown }): "var" | "built" | "none" {
  const v = env.PORTCULLIS_CONFIG;
  if (typeof v === "string" && v.trim() !== "") return "var";
  return built === undefined ? "none" : "built";
}
