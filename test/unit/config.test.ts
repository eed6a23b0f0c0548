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
    namespace: false
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
    // One upstream may keep its own names beside prefixed ones; a second namespace: false is refused.
    expect(text).toMatch(/upstreams\[2\]\.namespace: namespace: false is already on upstreams\[1\] \(dup\): one upstream at most keeps its own names/);
    expect(text).not.toMatch(/upstreams\[1\]\.namespace/);
  });

  it("names a missing secret without revealing any value", () => {
    const p = problems(ok, { OTHER: "value-that-must-not-leak" });
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the expected message quotes the config's ${NAME} syntax
    expect(p).toEqual(["upstreams[0].headers.Authorization: ${ONE_TOKEN} is not set as a Worker secret or var"]);
    expect(p.join()).not.toContain("value-that-must-not-leak");
  });

  // biome-ignore-start lint/suspicious/noTemplateCurlyInString: these configs and messages quote the ${NAME} syntax literally
  const headersConfig = (headers: string, extra = "") => `
upstreams:
  - name: one
    url: https://one.example.com/mcp
    headers: ${headers}
${extra}`;

  it("expands ${NAME:-fallback}: the fallback when NAME is unset or empty, else NAME", () => {
    const text = headersConfig(`{ Authorization: "Bearer \${TOKEN:-dev token}", X-Org: "\${ORG:-acme}/\${TEAM:-core}" }`);
    const unset = loadConfig(text, {});
    expect(unset.upstreams[0]!.headers).toEqual({ Authorization: "Bearer dev token", "X-Org": "acme/core" });
    const empty = loadConfig(text, { TOKEN: "", ORG: "" });
    expect(empty.upstreams[0]!.headers).toEqual({ Authorization: "Bearer dev token", "X-Org": "acme/core" });
    const set = loadConfig(text, { TOKEN: "s3cret", ORG: "initech", TEAM: "ops" });
    expect(set.upstreams[0]!.headers).toEqual({ Authorization: "Bearer s3cret", "X-Org": "initech/ops" });
    // A binding that is not a string (a KV namespace, a D1 database) is not a value: the fallback stands.
    expect(loadConfig(text, { TOKEN: { prepare() {} } }).upstreams[0]!.headers.Authorization).toBe("Bearer dev token");
  });

  it("omits a header whose whole value expands empty, and sends it once the secret is set", () => {
    const text = headersConfig(`{ Authorization: "\${TOKEN:-}", X-Empty: "\${EMPTY}", X-Keep: "kept" }`);
    const c = loadConfig(text, { EMPTY: "" });
    expect(c.upstreams[0]!.headers).toEqual({ "X-Keep": "kept" });
    expect(Object.hasOwn(c.upstreams[0]!.headers, "Authorization")).toBe(false);
    const set = loadConfig(text, { TOKEN: "Bearer s3cret", EMPTY: "" });
    expect(set.upstreams[0]!.headers).toEqual({ Authorization: "Bearer s3cret", "X-Keep": "kept" });
    expect(set.upstreams[0]!.credentials.mode).toBe("brokered");
    // With every header omitted no credential is sent, and the default mode says so.
    const none = loadConfig(headersConfig(`{ Authorization: "\${TOKEN:-}" }`), {});
    expect(none.upstreams[0]!.headers).toEqual({});
    expect(none.upstreams[0]!.credentials.mode).toBe("none");
  });

  it("still reports every unset bare ${NAME} by name, next to references that fall back", () => {
    const p = problems(headersConfig(`{ Authorization: "Bearer \${TOKEN}", X-Org: "\${ORG:-acme}", X-Team: "\${TEAM}-\${ZONE:-eu}" }`), { ZONE: "us" });
    expect(p).toEqual([
      "upstreams[0].headers.Authorization: ${TOKEN} is not set as a Worker secret or var",
      "upstreams[0].headers.X-Team: ${TEAM} is not set as a Worker secret or var",
    ]);
  });

  it("never puts a secret's value in an error, and never expands a secret's value again", () => {
    const text = headersConfig(`{ Authorization: "Bearer \${TOKEN}", X-Api-Key: "\${API_KEY:-none}", X-Missing: "\${MISSING}" }`);
    const secrets = { TOKEN: "tok-must-not-leak", API_KEY: "key-must-not-leak" };
    const p = problems(text, secrets);
    expect(p).toEqual(["upstreams[0].headers.X-Missing: ${MISSING} is not set as a Worker secret or var"]);
    let message = "";
    try {
      loadConfig(text, secrets);
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toContain("${MISSING}");
    for (const v of Object.values(secrets)) expect(`${message}\n${p.join("\n")}`).not.toContain(v);
    // A value that itself looks like a reference is sent as it is: expansion is one pass.
    const c = loadConfig(headersConfig(`{ Authorization: "\${TOKEN}" }`), { TOKEN: "${NOT_A_REFERENCE}" });
    expect(c.upstreams[0]!.headers.Authorization).toBe("${NOT_A_REFERENCE}");
  });

  it("refuses a ${NAME:-fallback} header under credentials mode none, like ${NAME}", () => {
    const p = problems(headersConfig(`{ Authorization: "\${TOKEN:-}" }`, "    credentials: { mode: none }"), { TOKEN: "tok-must-not-leak" });
    expect(p).toEqual(["upstreams[0].credentials.mode: mode none cannot send secrets: drop the ${...} headers or use mode brokered"]);
  });
  // biome-ignore-end lint/suspicious/noTemplateCurlyInString: see biome-ignore-start

  it("rejects YAML with duplicate keys and an empty upstream list", () => {
    expect(problems("upstreams: []\nupstreams: []\n")[0]).toMatch(/^config line 2, column 1: Map keys must be unique\n/);
    expect(problems("upstreams: []\n")[0]).toMatch(/at least one upstream/);
  });
});
