/**
 * A rule that stops matching is reported at once, on the production build: a gateway in enforce
 * in front of a 2026-07-28 upstream with a deny rule on its `ask_name` tool (by stable identity).
 * While the tool is listed the watch is clean; the upstream then drops it, and the next tools/list
 * (one catalog refresh) reports the rule: operators see it in /readyz, the caller's team chain
 * holds one `policy.unmatched` record naming the rule (the export still verifies), and agents and
 * the upstream are untouched by it. All on loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import type { LedgerEntry } from "../../src/ledger/records.ts";
import { verifyExport } from "../../src/ledger/export-verifier.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { grantFor, modern } from "./mcp.ts";

type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let upstream: Upstream;
let gw: Proc & { url: string };
let origin = "";
let jwk = "";
const TEAM = "team-watch";

const token = async (sub: string, roles: string[], tools: string[] = []) =>
  (await grantFor(jwk, origin, { sub, team: TEAM, roles: roles as never, tools, ttlSeconds: 900 })).token;

beforeAll(async () => {
  upstream = await startModernOnlyUpstream();
  jwk = JSON.stringify((await generateSigningKey("policy-watch")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  gw = await startPortcullis(
    `
mode: enforce
auth:
  required: true
egress:
  allow_loopback: true
upstreams:
  - name: rec
    url: ${upstream.url}
    timeout: 30s
policy:
  rules:
    - id: no-names
      match: { upstream: rec, tool: ask_name }
      decision: deny
      reason: the agent may not ask for names
`,
    port,
    { PORTCULLIS_SIGNING_KEY: jwk },
  );
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), upstream?.close()]);
});

const list = async (bearer: string) => {
  const r = await modern(`${origin}/mcp`, bearer, "tools/list", {}, { id: 1, timeoutMs: 30_000 });
  return ((r.result?.tools ?? []) as { name: string }[]).map((t) => t.name);
};
const readyz = async (bearer: string) => (await fetch(`${origin}/readyz`, { headers: { authorization: `Bearer ${bearer}` } })).json();

describe("the policy watch", () => {
  it("an upstream that drops the tool a deny rule names: reported within one catalog refresh (/readyz, a policy.unmatched record)", async () => {
    const agent = await token("agent:watch", ["agent"], ["*"]);
    const operator = await token("human:watch-op", ["operator", "auditor"]);
    const names = await list(agent);
    expect(names).toContain("bump");
    expect(names).not.toContain("ask_name"); // denied unconditionally: hidden
    expect(await readyz(operator)).toMatchObject({ ok: true, policy: { mode: "enforce", unmatched: [] } });

    upstream.dropTool("ask_name");
    expect(await list(agent)).toContain("bump"); // the refresh: the upstream's list without ask_name

    const report = await readyz(operator);
    expect(report.policy.unmatched).toEqual([
      // What it matched in the listing before the drop (this gateway runs one isolate, which made both listings).
      expect.stringMatching(
        /^rule no-names \(deny\): match names "upstream rec", "ask_name", which matches no tool of the \d+ known \(in the previous listing it matched "ask_name"\)/,
      ),
    ]);

    // The record on the caller's team chain, written off the listing's path: poll the export.
    let records: LedgerEntry[] = [];
    let lines: string[] = [];
    for (let i = 0; i < 40 && records.length === 0; i++) {
      if (i) await new Promise((r) => setTimeout(r, 250));
      const exp = await fetch(`${origin}/v1/ledger/export`, { headers: { authorization: `Bearer ${operator}` } });
      lines = (await exp.text()).split("\n").filter((l) => l !== "");
      records = lines.map((l) => JSON.parse(l)).flatMap((o) => (o.entry?.kind === "policy.unmatched" ? [o.entry as LedgerEntry] : []));
    }
    expect(records).toHaveLength(1);
    expect(records[0]!.chain).toBe(TEAM);
    expect(records[0]!.body).toMatchObject({
      principal: "agent:watch",
      mode: "enforce",
      rules: [{ rule: "no-names", decision: "deny", blocking: true, matched_before: ["ask_name"] }],
    });
    // Listing again reports nothing new.
    await list(agent);
    const again = (await (await fetch(`${origin}/v1/ledger/export`, { headers: { authorization: `Bearer ${operator}` } })).text())
      .split("\n")
      .filter((l) => l.includes('"kind":"policy.unmatched"'));
    expect(again).toHaveLength(1);
    const jwks = await (await fetch(`${origin}/.well-known/jwks.json`)).json();
    const verified = await verifyExport(lines, jwks);
    expect(verified.ok, JSON.stringify(verified.firstBad)).toBe(true);
  }, 120_000);
});
