import { describe, expect, it } from "vitest";
import { layerViolations } from "./layers.ts";

// Vite inlines every source file's text at build time: the test reads the tree as it is.
const raw = {
  ...import.meta.glob("../../src/**/*.{ts,tsx}", { query: "?raw", import: "default", eager: true }),
  ...import.meta.glob("../../durable-objects/**/*.ts", { query: "?raw", import: "default", eager: true }),
} as Record<string, string>;
const files = Object.fromEntries(Object.entries(raw).map(([k, v]) => [k.replace(/^\.\.\/\.\.\//, ""), v]));

describe("layers", () => {
  it("reads the whole tree", () => {
    expect(Object.keys(files).length).toBeGreaterThan(40);
    expect(files["src/index.ts"]).toContain("Hono");
  });
  it("every import points down the layer order, and no file imports itself through a cycle", () => {
    expect(layerViolations(files)).toEqual([]);
  });
  it("flags an upward import, a sideways import and a cycle", () => {
    const v = layerViolations({
      "src/wire/a.ts": 'import { x } from "../mcp/b.ts";',
      "src/mcp/b.ts": 'export { y } from "../wire/a.ts";',
      "src/governance/c.ts": 'import type { P } from "../identity/p.ts";',
      "src/identity/p.ts": "export type P = 1;",
    });
    expect(v.some((p) => p.startsWith("src/wire/a.ts (wire) imports src/mcp/b.ts"))).toBe(true);
    expect(v.some((p) => p.startsWith("src/governance/c.ts (governance) imports src/identity/p.ts"))).toBe(true);
    expect(
      v.some(
        (p) =>
          p.startsWith("import cycle: src/mcp/b.ts → src/wire/a.ts → src/mcp/b.ts") ||
          p.startsWith("import cycle: src/wire/a.ts → src/mcp/b.ts → src/wire/a.ts"),
      ),
    ).toBe(true);
  });
});
