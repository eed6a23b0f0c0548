import { describe, expect, it } from "vitest";
import type { UpstreamConfig } from "../../src/config/load.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import { exposeName, exposeUri, splitName, splitUri } from "../../src/mcp/names.ts";
import { globMatch } from "../../src/wire/glob.ts";
import { toolAllowed } from "../../src/governance/grant-scope.ts";

const up = (name: string, extra: Partial<UpstreamConfig> = {}): UpstreamConfig => ({
  name,
  url: "http://127.0.0.1/mcp",
  namespaced: true,
  headers: {},
  allow: [],
  deny: [],
  timeoutMs: 1000,
  credentials: { mode: "none", header: "Authorization", prefix: "Bearer " },
  egress: DEFAULT_EGRESS_RULES,
  onLoopback: false,
  ...extra,
});

describe("exposed names", () => {
  const a = up("alpha");
  const b = up("beta-2");
  it("prefixes and splits tool names at the first __", () => {
    expect(exposeName(a, "read__file")).toBe("alpha__read__file");
    expect(splitName([a, b], "alpha__read__file")).toEqual({ up: a, name: "read__file" });
    expect(splitName([a, b], "beta-2__x")?.up).toBe(b);
    expect(splitName([a, b], "gamma__x")).toBeNull();
    expect(splitName([a, b], "nounderscore")).toBeNull();
  });
  it("keeps names unchanged for one transparent upstream", () => {
    const t = up("solo", { namespaced: false });
    expect(exposeName(t, "test_simple_text")).toBe("test_simple_text");
    expect(splitName([t], "test_simple_text")).toEqual({ up: t, name: "test_simple_text" });
    expect(splitUri([t], "test://static-text")).toEqual({ up: t, uri: "test://static-text" });
  });
  it("aliases names over 64 characters deterministically", () => {
    const long = "x".repeat(80);
    const e1 = exposeName(a, long);
    expect(e1.length).toBeLessThanOrEqual(64);
    expect(e1).toBe(exposeName(a, long));
    expect(e1).not.toBe(exposeName(a, `${"x".repeat(79)}y`));
    expect(e1.startsWith("alpha__")).toBe(true);
  });
  it("prefixes URIs with the upstream as a scheme prefix", () => {
    expect(exposeUri(a, "test://static-text")).toBe("alpha+test://static-text");
    expect(splitUri([a, b], "alpha+test://static-text")).toEqual({ up: a, uri: "test://static-text" });
    expect(splitUri([a, b], "test://static-text")).toBeNull();
  });
  it("matches globs and applies deny over allow", () => {
    expect(globMatch("read_*", "read_file")).toBe(true);
    expect(globMatch("read_?", "read_ab")).toBe(false);
    expect(globMatch("a.b", "aXb")).toBe(false);
    const f = up("f", { allow: ["read_*", "echo"], deny: ["read_secret*"] });
    expect(toolAllowed(f, "read_file")).toBe(true);
    expect(toolAllowed(f, "echo")).toBe(true);
    expect(toolAllowed(f, "write_file")).toBe(false);
    expect(toolAllowed(f, "read_secret_key")).toBe(false);
  });
});
