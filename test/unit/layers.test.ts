import { describe, expect, it } from "vitest";
import { ALLOWED, layerOf, layerViolations } from "./layers.ts";

// Vite inlines every source file's text at build time: the test reads the tree as it is.
const raw = {
  ...import.meta.glob("../../src/**/*.{ts,tsx}", { query: "?raw", import: "default", eager: true }),
  ...import.meta.glob("../../durable-objects/**/*.ts", { query: "?raw", import: "default", eager: true }),
} as Record<string, string>;
const architecture = Object.values(import.meta.glob("../../docs/architecture.md", { query: "?raw", import: "default", eager: true }))[0] as string;
const files = Object.fromEntries(Object.entries(raw).map(([k, v]) => [k.replace(/^\.\.\/\.\.\//, ""), v]));

describe("layers", () => {
  it("reads the whole tree", () => {
    expect(Object.keys(files).length).toBeGreaterThan(40);
    expect(files["src/index.ts"]).toContain("Hono");
  });
  it("every import points down the layer order, and no file imports itself through a cycle", () => {
    expect(layerViolations(files)).toEqual([]);
  });
  it("the storage contract's files are the store layer: contract.ts, the contract-<object>.ts files split from it, object-names.ts", () => {
    for (const p of [
      "durable-objects/contract.ts",
      "durable-objects/contract-holds.ts",
      "durable-objects/contract-killswitch.ts",
      "durable-objects/object-names.ts",
      "src/env.ts",
      "migrations/0001_ledger.sql",
    ])
      expect(layerOf(p)).toBe("store");
    for (const p of ["durable-objects/killswitch.ts", "durable-objects/contracts.ts", "durable-objects/contract-.ts", "durable-objects/ledger-schema.ts"])
      expect(layerOf(p)).toBe("objects");
  });
  it("flags an upward import, a sideways import and a cycle", () => {
    const v = layerViolations({
      "src/wire/a.ts": 'import { x } from "../front/b.ts";',
      "src/front/b.ts": 'export { y } from "../wire/a.ts";',
      "src/governance/c.ts": 'import type { P } from "../identity/p.ts";',
      "src/identity/p.ts": "export type P = 1;",
    });
    expect(v.some((p) => p.startsWith("src/wire/a.ts (wire) imports src/front/b.ts"))).toBe(true);
    expect(v.some((p) => p.startsWith("src/governance/c.ts (governance) imports src/identity/p.ts"))).toBe(true);
    expect(
      v.some(
        (p) =>
          p.startsWith("import cycle: src/front/b.ts → src/wire/a.ts → src/front/b.ts") ||
          p.startsWith("import cycle: src/wire/a.ts → src/front/b.ts → src/wire/a.ts"),
      ),
    ).toBe(true);
  });
  it("flags a file reaching a sibling its folder's rules keep it from", () => {
    const v = layerViolations({
      "durable-objects/holds.ts": 'import { x } from "./ledger-rows.ts";\nimport type { C } from "./contract.ts";',
      "durable-objects/ledger-rows.ts": "export const x = 1;",
      "durable-objects/contract.ts": "export type C = 1;",
      "durable-objects/killswitch.ts": 'import type { K } from "./contract-killswitch.ts";',
      "durable-objects/contract-killswitch.ts": "export type K = 1;",
      "src/upstream/exchange.ts": 'import { f } from "./forward.ts";',
      "src/upstream/forward.ts": "export const f = 1;",
      "src/front/legacy.ts": 'import { m } from "./modern.ts";',
      "src/front/modern.ts": "export const m = 1;",
      "src/ports/hold-store.ts": 'import { w } from "./ledger-writer.ts";\nimport { t } from "./hold-tasks.ts";',
      "src/ports/ledger-writer.ts": "export const w = 1;",
      "src/ports/hold-tasks.ts": "export const t = 1;",
    });
    expect(
      v.some((p) => p.startsWith("durable-objects/holds.ts imports durable-objects/ledger-rows.ts: in durable-objects/ a file imports only its own family")),
    ).toBe(true);
    expect(v.some((p) => p.startsWith("src/upstream/exchange.ts imports src/upstream/forward.ts: in src/upstream/ a file imports only lower-ranked"))).toBe(
      true,
    );
    expect(v.some((p) => p.startsWith("src/front/legacy.ts imports src/front/modern.ts: in src/front/ legacy.ts never imports modern.ts"))).toBe(true);
    expect(v.filter((p) => p.includes("imports durable-objects/contract") || p.startsWith("src/ports/"))).toEqual([]);
  });
  it("docs/architecture.md's layer table is this test's table", () => {
    const table: Record<string, string[]> = {};
    for (const line of architecture.split("\n")) {
      const m = /^\| [^|]*\(`(\w+)`\) \|.*\| ([^|]+) \|$/.exec(line);
      if (m) table[m[1]!] = m[2]!.trim() === "nothing" ? [] : m[2]!.split(",").map((x) => x.trim());
    }
    expect(table).toEqual(ALLOWED);
  });
});
