/**
 * How the config loader's problems read: a YAML error names its source, line and column and shows
 * the line with its neighbours and a caret (a credential on those lines hidden); every layer's
 * problems at once — schema, headers, policy, mappings and, given the CEL compiler, the `when` of
 * every readable rule; an unknown key names the nearest known one; an inline secret in `headers`
 * is refused with the one rule and wording `portcullis add` uses. Owns nothing but these checks.
 * Must never: depend on another test's config.
 */
import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { inlineSecretProblem } from "../../src/config/inline-secret.ts";
import { ConfigError, type LoadOptions, loadConfig } from "../../src/config/load.ts";
import { didYouMean, editDistance, yamlProblem } from "../../src/config/problems.ts";
import { compileCondition } from "../../src/governance/policy-cel.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";

function problems(text: string, opts: LoadOptions = {}, vars: Record<string, unknown> = {}): string[] {
  try {
    loadConfig(text, vars, opts);
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  return [];
}

const UP = "upstreams:\n  - name: one\n    url: https://one.example.com/mcp\n";

describe("a YAML error", () => {
  it("names the file, line and column, then shows lines 4–6 with a caret under the column", () => {
    const text = "actor: local:x\nupstreams:\n  - name: one\n    url: https://one.example.com/mcp\nactor: again\nmode: enforce\nunclassified_reads: block\n";
    const [p, ...rest] = problems(text, { source: "portcullis.yaml" });
    expect(rest).toEqual([]);
    expect(p).toBe(
      [
        "portcullis.yaml line 5, column 1: Map keys must be unique",
        "    4 |     url: https://one.example.com/mcp",
        "    5 | actor: again",
        "      | ^",
        "    6 | mode: enforce",
      ].join("\n"),
    );
  });

  it("puts the caret under the column, and is called config without a source", () => {
    const p = problems(`${UP}mode: [enforce\n`)[0]!;
    expect(p).toMatch(/^config line \d+, column \d+: /);
    const lines = p.split("\n");
    const caret = lines.findIndex((l) => /\| +\^$/.test(l));
    expect(caret).toBeGreaterThan(1);
    const col = Number(/column (\d+)/.exec(lines[0]!)![1]);
    expect(lines[caret]!.indexOf("^") - lines[caret]!.indexOf("|") - 2).toBe(col - 1);
  });

  it("never shows a value on those lines that looks like a credential", () => {
    const secret = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0";
    const text = `${UP}    headers:\n      Authorization: "Bearer ${secret}"\n    headers: {}\n`;
    const p = problems(text)[0]!;
    expect(p).toMatch(/Map keys must be unique/);
    expect(p).toContain("Authorization: …");
    expect(p).not.toContain(secret.slice(8, 24));
  });

  it("reads the yaml library's error without a position too", () => {
    expect(yamlProblem(new Error("something odd"), "", "m.yaml")).toBe("m.yaml: something odd");
  });
});

describe("every layer at once", () => {
  const text = `actor: local:x
upstream: []
upstreams:
  - name: one
    url: https://one.example.com/mcp
    namspace: true
    headers:
      Authorization: "Bearer sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
mappings:
  one:
    tools:
      read: { effect: read_only, colur: red }
policy:
  rules:
    - id: broken
      decision: deny
      reason: r
      when: "args.amount >"
    - id: shape
      decision: maybe
      reason: r
      when: "1 + 1"
    - id: typo
      decision: allow
      reason: r
      whenn: "true"
`;

  it("reports schema, header, mapping, policy and CEL problems together, each with its path", () => {
    const p = problems(text, { conditions: compileCondition });
    const at = (re: RegExp) =>
      expect(
        p.some((x) => re.test(x)),
        `${re} in ${JSON.stringify(p, null, 2)}`,
      ).toBe(true);
    at(/^upstreams\[0\]: unknown key "namspace" — did you mean "namespace"\?$/);
    at(/^\(root\): unknown key "upstream" — did you mean "upstreams"\?$/);
    at(/^upstreams\[0\]\.headers\.Authorization: the value looks like an inline secret/);
    at(/^mappings\.one\.tools\.read: unknown key "colur"/);
    at(/^policy\.rules\[1\]\.decision: /);
    at(/^policy\.rules\[2\]: unknown key "whenn" — did you mean "when"\?$/);
    at(/^policy\.rules\[0\]\.when: CEL does not parse/);
    at(/^policy\.rules\[1\]\.when: a condition must be a bool/);
    expect(new Set(p).size).toBe(p.length);
  });

  it("reports the CEL problems next to problems of the layers after the schema (identity, headers)", () => {
    const p = problems(
      `actor: "oidc:idp.example.com:me"
auth:
  external_issuers:
    - { issuer: "https://idp.example.com", jwks_url: "https://idp.example.com/jwks", audience: a }
${UP}    headers: { Authorization: "Bearer \${MISSING_TOKEN}" }
policy:
  rules:
    - { id: r, decision: deny, reason: r, when: "args.x ==" }
`,
      { conditions: compileCondition },
    );
    expect(p.some((x) => /^upstreams\[0\]\.headers\.Authorization: \$\{MISSING_TOKEN\} is not set/.test(x))).toBe(true);
    expect(p.some((x) => /^actor "oidc:idp\.example\.com:me" is in the principal space/.test(x))).toBe(true);
    expect(p.some((x) => /^policy\.rules\[0\]\.when: CEL does not parse/.test(x))).toBe(true);
  });

  it("without the CEL compiler (or with nothing else wrong) leaves conditions to the policy compile", () => {
    expect(problems(`${UP}policy:\n  rules:\n    - { id: r, decision: deny, reason: r, when: "args.x ==" }\n`, { conditions: compileCondition })).toEqual([]);
    expect(problems(`${UP}bogus: 1\npolicy:\n  rules:\n    - { id: r, decision: deny, reason: r, when: "args.x ==" }\n`)).toEqual([
      '(root): unknown key "bogus"',
    ]);
  });
});

describe("did you mean", () => {
  it("is the nearest known key within a bounded edit distance (transpositions count once)", () => {
    expect(editDistance("namspace", "namespace")).toBe(1);
    expect(editDistance("nmaespace", "namespace")).toBe(1);
    expect(editDistance("abc", "xyzxyzxyz")).toBe(4);
    expect(didYouMean("namspace", ["name", "url", "namespace"])).toBe("namespace");
    expect(didYouMean("Timeout", ["timeout", "allow"])).toBe("timeout");
    expect(didYouMean("colour", ["name", "url", "allow"])).toBeUndefined();
    expect(didYouMean("ur", ["url", "allow"])).toBe("url");
  });

  it("names the nearest key of the object the unknown key is in, at every level", () => {
    expect(problems(`${UP}    timout: 5s\n`)).toEqual(['upstreams[0]: unknown key "timout" — did you mean "timeout"?']);
    expect(problems(`auth:\n  requird: true\n${UP}`)).toEqual(['auth: unknown key "requird" — did you mean "required"?']);
    expect(problems(`${UP}policy:\n  rule: []\n`)).toEqual(['policy: unknown key "rule" — did you mean "rules"?']);
  });
});

describe("PUT /v1/config (the Worker's loader)", () => {
  const GW = "http://127.0.0.1";
  const put = async (text: string) => {
    const keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
    const admin = (
      await mintGrant(keys, { iss: GW, aud: GW, sub: "human:root", team: "t", roles: ["admin"], tools: ["*"], ttlSeconds: 600 }, { maxLifetimeSeconds: 86400 })
    ).token;
    const r = await SELF.fetch(`${GW}/v1/config`, { method: "PUT", headers: { authorization: `Bearer ${admin}`, "content-type": "text/yaml" }, body: text });
    return { status: r.status, problems: ((await r.json()) as { problems?: string[] }).problems ?? [] };
  };

  it("answers a YAML error with its line and neighbours, and schema and CEL problems together", async () => {
    const yaml = await put(`actor: local:x\n${UP}actor: again\n`);
    expect(yaml.status).toBe(400);
    expect(yaml.problems).toEqual([
      "config line 5, column 1: Map keys must be unique\n    4 |     url: https://one.example.com/mcp\n    5 | actor: again\n      | ^",
    ]);
    const layers = await put(`${UP}    timout: 5s\npolicy:\n  rules:\n    - { id: r, decision: deny, reason: r, when: "tool.name ===" }\n`);
    expect(layers.status).toBe(400);
    expect(layers.problems[0]).toBe('upstreams[0]: unknown key "timout" — did you mean "timeout"?');
    expect(layers.problems.some((p) => /^policy\.rules\[0\]\.when: CEL does not parse/.test(p))).toBe(true);
  });
});

// biome-ignore-start lint/suspicious/noTemplateCurlyInString: the messages name the ${NAME} reference syntax literally
describe("an inline secret in headers", () => {
  it("is refused by the loader with add's rule and wording, naming the secret to set and never the value", () => {
    const value = "Bearer ghp_0123456789abcdefABCDEF0123456789abcd";
    const p = problems(`upstreams:\n  - name: github\n    url: https://api.example.com/mcp\n    headers:\n      Authorization: "${value}"\n`);
    const expected = inlineSecretProblem("github", "Authorization", value, new Set());
    expect(p).toEqual([`upstreams[0].headers.Authorization: ${expected}`]);
    expect(p[0]).toContain('write it as Authorization: "Bearer ${GITHUB_TOKEN}"');
    expect(p[0]).toContain("npx wrangler secret put GITHUB_TOKEN");
    expect(p[0]).not.toContain("ghp_0123");
    // add says the same, as the flag to give.
    expect(inlineSecretProblem("github", "Authorization", value, new Set(), "flag")).toContain('--header "Authorization: Bearer ${GITHUB_TOKEN}"');
  });

  it("passes references, fallbacks and plain values", () => {
    const c = loadConfig(
      `upstreams:\n  - name: one\n    url: https://one.example.com/mcp\n    headers: { Authorization: "Bearer \${T:-}", X-Org: acme/core, X-Test: add-cli }\n`,
      {},
    );
    expect(c.upstreams[0]!.headers).toEqual({ Authorization: "Bearer ", "X-Org": "acme/core", "X-Test": "add-cli" });
    expect(
      problems(`upstreams:\n  - name: one\n    url: https://one.example.com/mcp\n    headers: { X-Api-Key: "\${ONE_KEY}" }\n`, {}, { ONE_KEY: "k" }),
    ).toEqual([]);
  });
});
// biome-ignore-end lint/suspicious/noTemplateCurlyInString: see biome-ignore-start
