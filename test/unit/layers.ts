/**
 * The layer rule of docs/architecture.md as data, and the checker the layer test runs: every import under
 * `src/` and `durable-objects/` must point at the file's own layer or one it is allowed to use.
 * Owns the table of layers and their allowed imports. Must never: read anything but source text.
 */

/** Layer of a repository path, or null for files outside the layered tree. */
export function layerOf(path: string): string | null {
  if (path === "src/env.ts") return "store";
  // The D1 schema (migrations/*.sql, imported as text by durable-objects/ledger-schema.ts) is part of the storage contract.
  if (/^migrations\/[^/]+\.sql$/.test(path)) return "store";
  // The Worker and its package entries (the DO classes, and the handler a gateway project imports).
  if (path === "src/index.ts" || path === "src/objects.ts" || path === "src/worker.ts") return "app";
  // The storage contract: contract.ts and the contract-<object>.ts files split from it, and the object names.
  if (/^durable-objects\/contract(-[a-z]+)?\.ts$/.test(path) || path === "durable-objects/object-names.ts") return "store";
  if (path.startsWith("durable-objects/")) return "objects";
  const m = /^src\/([^/]+)\//.exec(path);
  return m ? m[1]! : null;
}

/**
 * What each layer may import besides itself. `store` is the storage contract: record shapes,
 * object names and the Env bindings — types, name builders and the pure rules a stored record
 * keeps (a kill-switch change's bounds), importing `wire` and the ledger's pure record code. `ledger` (records, hashing, chain and checkpoint rules) is shared
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
  protocol: ["wire", "config", "store", "governance", "ledger"],
  upstream: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "protocol"],
  ports: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "protocol", "upstream"],
  services: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "protocol", "upstream", "ports"],
  front: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "protocol", "upstream", "ports", "services"],
  console: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "protocol", "upstream", "ports", "services", "front"],
  routes: ["wire", "config", "store", "identity", "egress", "governance", "ledger", "protocol", "upstream", "ports", "services", "front", "console"],
  app: [
    "wire",
    "config",
    "store",
    "identity",
    "egress",
    "governance",
    "ledger",
    "protocol",
    "upstream",
    "ports",
    "services",
    "front",
    "console",
    "routes",
    "objects",
  ],
  objects: ["wire", "store", "ledger"],
};

/**
 * Rules inside a folder, where its files must not reach each other freely. In `durable-objects/`,
 * `src/ports/` and `src/services/` a file imports only its own family (the basename's first word:
 * `ledger-commit.ts` is of `ledger`, `hold-tasks.ts` of `hold`), the folder's shared files, and the
 * pairs named: each object and each port stands over its own state. In `src/upstream/` a file
 * imports only siblings of a lower rank: the HTTP exchange is the bottom, the catalog the top. In
 * `src/front/` the two eras' fronts never import each other.
 */
export const SIBLINGS: Record<string, { shared?: string[]; also?: Record<string, string[]>; rank?: Record<string, number>; never?: [string, string][] }> = {
  "durable-objects": { shared: ["contract.ts", "contract-history.ts", "contract-holds.ts", "contract-killswitch.ts", "contract-ledger.ts", "object-names.ts"] },
  "src/ports": { shared: ["ledger-writer.ts"] },
  "src/services": { also: { "policy-live.ts": ["health.ts"], "runs.ts": ["run-records.ts", "run-rollback.ts"] } },
  "src/upstream": {
    rank: {
      "exchange.ts": 0,
      "client.ts": 1,
      "catalog-cache.ts": 1,
      "unavailable.ts": 1,
      "rounds.ts": 1,
      "rounds-object.ts": 2,
      "legs.ts": 2,
      "forward.ts": 2,
      "tool-catalog.ts": 3,
    },
  },
  "src/front": {
    never: [
      ["legacy.ts", "modern.ts"],
      ["modern.ts", "legacy.ts"],
    ],
  },
};

const family = (base: string) => base.replace(/\.tsx?$/, "").split("-")[0]!;

/** Why `from` may not import its sibling `to` under SIBLINGS, or null when it may. */
export function siblingProblem(from: string, to: string): string | null {
  const dir = from.slice(0, from.lastIndexOf("/"));
  if (to.slice(0, to.lastIndexOf("/")) !== dir) return null;
  const rule = SIBLINGS[dir];
  if (!rule) return null;
  const a = from.slice(dir.length + 1);
  const b = to.slice(dir.length + 1);
  if (rule.never?.some(([x, y]) => x === a && y === b)) return `${from} imports ${to}: in ${dir}/ ${a} never imports ${b}`;
  if (rule.rank) {
    const ra = rule.rank[a];
    const rb = rule.rank[b];
    if (ra === undefined || rb === undefined) return `${from} imports ${to}: every file of ${dir}/ needs a rank in SIBLINGS`;
    return rb < ra ? null : `${from} imports ${to}: in ${dir}/ a file imports only lower-ranked siblings (${a} ${ra}, ${b} ${rb})`;
  }
  if (rule.never && !rule.shared && !rule.also) return null;
  if (family(a) === family(b) || rule.shared?.includes(b) || rule.also?.[a]?.includes(b)) return null;
  return `${from} imports ${to}: in ${dir}/ a file imports only its own family (${family(a)}-), ${[...(rule.shared ?? [])].join(", ") || "no shared file"} and the pairs SIBLINGS names`;
}

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
      const sibling = siblingProblem(path, target);
      if (sibling) problems.push(sibling);
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
