/**
 * The layer rule of docs/architecture.md as data, and the checker the layer test runs: every import under
 * `src/` and `durable-objects/` must point at the file's own layer or one it is allowed to use.
 * Owns the table of layers and their allowed imports. Must never: read anything but source text.
 */

/** Layer of a repository path, or null for files outside the layered tree. */
export function layerOf(path: string): string | null {
  if (path === "src/env.ts") return "store";
  if (path === "src/index.ts") return "app";
  if (path === "durable-objects/records.ts" || path === "durable-objects/names.ts") return "store";
  if (path.startsWith("durable-objects/")) return "objects";
  const m = /^src\/([^/]+)\//.exec(path);
  return m ? m[1]! : null;
}

/**
 * What each layer may import besides itself. `store` is the storage contract: record shapes,
 * object names and the Env bindings — types and name builders only, importing `wire` and the
 * ledger's pure record code. `ledger` (records, hashing, chain and checkpoint rules) is shared
 * with the offline verifier, so it imports only `wire`.
 */
export const ALLOWED: Record<string, string[]> = {
  wire: [],
  config: ["wire"],
  store: ["wire", "ledger"],
  identity: ["wire", "config", "store"],
  egress: ["wire", "config", "store"],
  governance: ["wire", "config"],
  ledger: ["wire"],
  mcp: ["wire", "config", "store", "identity", "egress", "governance", "ledger"],
  console: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "mcp"],
  routes: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "mcp", "console"],
  app: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "mcp", "console", "routes", "objects"],
  objects: ["wire", "store", "ledger"],
};

/** Relative import specifiers of a source file (static, re-export, side-effect and dynamic). */
export function importsOf(text: string): string[] {
  const out: string[] = [];
  const re = /(?:^|[\s;])(?:import|export)\s[^"';]*?from\s*["']([^"']+)["']|(?:^|[\s;])import\s*["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/gm;
  for (const m of text.matchAll(re)) {
    const spec = m[1] ?? m[2] ?? m[3];
    if (spec?.startsWith(".")) out.push(spec);
  }
  return out;
}

function resolveRel(from: string, spec: string): string {
  const parts = from.split("/").slice(0, -1);
  for (const seg of spec.split("/")) {
    if (seg === "." || seg === "") continue;
    if (seg === "..") parts.pop();
    else parts.push(seg);
  }
  return parts.join("/");
}

/** Every violation in `files` (path → source text): wrong-direction imports and import cycles. */
export function layerViolations(files: Record<string, string>): string[] {
  const problems: string[] = [];
  const graph = new Map<string, string[]>();
  for (const [path, text] of Object.entries(files)) {
    const from = layerOf(path);
    if (from === null) continue;
    const allowed = ALLOWED[from];
    if (!allowed) {
      problems.push(`${path}: unknown layer "${from}"`);
      continue;
    }
    const edges: string[] = [];
    for (const spec of importsOf(text)) {
      const target = resolveRel(path, spec);
      const to = layerOf(target);
      if (to === null) {
        problems.push(`${path} imports ${spec}, which is outside the layered tree`);
        continue;
      }
      edges.push(target);
      if (to !== from && !allowed.includes(to))
        problems.push(`${path} (${from}) imports ${target} (${to}): ${from} may import only ${allowed.join(", ") || "nothing of the project"}`);
    }
    graph.set(path, edges);
  }
  // Cycles between files: a depth-first search reports each back edge once.
  const state = new Map<string, 1 | 2>();
  const stack: string[] = [];
  const visit = (n: string) => {
    state.set(n, 1);
    stack.push(n);
    for (const m of graph.get(n) ?? []) {
      if (state.get(m) === 1) problems.push(`import cycle: ${[...stack.slice(stack.indexOf(m)), m].join(" → ")}`);
      else if (!state.has(m)) visit(m);
    }
    stack.pop();
    state.set(n, 2);
  };
  for (const n of [...graph.keys()].sort()) if (!state.has(n)) visit(n);
  return problems;
}
