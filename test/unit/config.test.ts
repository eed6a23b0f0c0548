import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/load.ts";

const ok = `
upstreams:
  - name: one
    url: https://one.example.com/mcp
    headers: { Authorization: "Bearer \${ONE_TOKEN}" }
    allow: ["read_*"]
    deny: ["read_secret"]
    timeout: 5s
`;

function problems(text: string, vars: Record<string, unknown> = {}): string[] {
  try {
    loadConfig(text, vars);
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  return [];
}

describe("config", () => {
  it("loads a valid config, expands secrets and applies defaults", () => {
    const c = loadConfig(ok, { ONE_TOKEN: "s3cret" });
    expect(c.actor).toBe("local:actor");
    expect(c.upstreams[0]).toMatchObject({ name: "one", namespaced: false, timeoutMs: 5000, allow: ["read_*"], deny: ["read_secret"] });
    expect(c.upstreams[0]!.headers.Authorization).toBe("Bearer s3cret");
  });

  it("namespaces by default when there is more than one upstream", () => {
    const c = loadConfig("upstreams:\n  - {name: a, url: 'http://127.0.0.1:1/mcp'}\n  - {name: b, url: 'http://127.0.0.1:2/mcp'}\n", {});
    expect(c.upstreams.map((u) => u.namespaced)).toEqual([true, true]);
  });

  it("reports every error at once, naming paths", () => {
    const p = problems(`
colour: blue
upstreams:
  - name: Bad_Name
    url: stdio://x
    surprise: 1
    timeout: soon
  - name: dup
    url: http://127.0.0.1/a
    namespace: false
  - name: dup
    url: ftp://127.0.0.1/b
`);
    const text = p.join("\n");
    expect(p.length).toBeGreaterThanOrEqual(7);
    expect(text).toMatch(/colour/);
    expect(text).toMatch(/upstreams\[0\]\.name/);
    expect(text).toMatch(/upstreams\[0\]\.url/);
    expect(text).toMatch(/surprise/);
    expect(text).toMatch(/upstreams\[0\]\.timeout/);
    expect(text).toMatch(/upstreams\[2\]\.url/);
    expect(text).toMatch(/duplicate upstream name "dup"/);
    expect(text).toMatch(/namespace: false is only allowed with a single upstream/);
  });

  it("names a missing secret without revealing any value", () => {
    const p = problems(ok, { OTHER: "value-that-must-not-leak" });
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the expected message quotes the config's ${NAME} syntax
    expect(p).toEqual(["upstreams[0].headers.Authorization: ${ONE_TOKEN} is not set as a Worker secret or var"]);
    expect(p.join()).not.toContain("value-that-must-not-leak");
  });

  it("rejects YAML with duplicate keys and an empty upstream list", () => {
    expect(problems("upstreams: []\nupstreams: []\n")[0]).toMatch(/YAML/);
    expect(problems("upstreams: []\n")[0]).toMatch(/at least one upstream/);
  });
});
