/**
 * /summary end to end: its per-upstream tool counts are the tools the caller can list — the
 * upstream's allow/deny and the caller's grant — measured against what a real SDK client lists
 * through the same gateway. Owns the gateway it starts (server-everything behind it twice, one
 * with `deny: ["echo", "get-*"]`, one with an allow list). Must never: leave it running, or reach
 * beyond 127.0.0.1.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { freePort, root, startPortcullis } from "./harness.ts";

const everythingUrl = inject("everythingUrl");
const config = `
actor: local:summary
egress:
  allow_loopback: true
upstreams:
  - name: ev
    url: ${everythingUrl}
    deny: ["echo", "get-*"]
    timeout: 30s
  - name: open
    url: ${everythingUrl}
    allow: ["get-*", "echo"]
    timeout: 30s
`;
let gw: Awaited<ReturnType<typeof startPortcullis>>;
let origin = "";
let signingKey = "";

beforeAll(async () => {
  signingKey = JSON.stringify((await generateSigningKey("summary-key")).privateJwk);
  gw = await startPortcullis(config, await freePort(), { PORTCULLIS_SIGNING_KEY: signingKey });
  origin = new URL(gw.url).origin;
});
afterAll(async () => {
  await gw?.stop();
});

async function listed(url: string, authorization?: string): Promise<string[]> {
  const client = new Client({ name: "summary-e2e", version: "1" }, { versionNegotiation: { mode: "legacy" } });
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: authorization ? { authorization } : {} } });
  await client.connect(transport);
  try {
    const names: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 20; page++) {
      const r = await client.listTools(cursor ? { cursor } : {});
      names.push(...r.tools.map((t) => t.name));
      if (!r.nextCursor) break;
      cursor = r.nextCursor;
    }
    return names;
  } finally {
    await transport.terminateSession().catch(() => undefined);
    await client.close().catch(() => undefined);
  }
}

type Summary = { upstreams: { name: string; tools: number | null; namespaced: boolean }[] };
const counts = (s: Summary) => Object.fromEntries(s.upstreams.map((u) => [u.name, u.tools]));
const byPrefix = (names: string[]) => ({ ev: names.filter((n) => n.startsWith("ev__")).length, open: names.filter((n) => n.startsWith("open__")).length });

describe("/summary counts what the caller can list", () => {
  it("applies each upstream's allow/deny: the counts equal what an SDK client lists (loopback actor)", async () => {
    const raw = await listed(everythingUrl);
    const deniedHere = raw.filter((n) => n === "echo" || n.startsWith("get-"));
    expect(deniedHere.length).toBeGreaterThan(1);
    expect(raw.length - deniedHere.length).toBeGreaterThan(0);
    const through = byPrefix(await listed(gw.url));
    expect(through).toEqual({ ev: raw.length - deniedHere.length, open: deniedHere.length });
    const r = await fetch(`${origin}/summary`);
    expect(r.status).toBe(200);
    const s = (await r.json()) as Summary;
    expect(counts(s)).toEqual(through);
    expect(s.upstreams.every((u) => u.namespaced)).toBe(true);
  });

  it("summary(cfg, principal) and /summary with a grant apply it on exposed names: equal to that grant's SDK listing", async () => {
    const tools = ["ev__trigger-*", "ev__get-*", "open__get-*", "nope__*"];
    const keys = await parseKeySet(signingKey);
    const { token } = await mintGrant(
      keys,
      { iss: origin, aud: origin, sub: "agent:summary", team: "e2e", roles: ["agent"], tools, ttlSeconds: 600 },
      { maxLifetimeSeconds: 3600 },
    );
    const through = byPrefix(await listed(gw.url, `Bearer ${token}`));
    expect(through.ev).toBeGreaterThan(0);
    expect(through.open).toBeGreaterThan(0);
    // /summary with that grant (behind the same gate as /mcp).
    const r = await fetch(`${origin}/summary`, { headers: { authorization: `Bearer ${token}` } });
    expect(r.status).toBe(200);
    expect(counts((await r.json()) as Summary)).toEqual(through);
    // The per-request config the gateway would hand /summary (upstreams on loopback), and this caller.
    const { loadConfig } = await import(resolve(root, "src/config/load.ts"));
    const { summary } = await import(resolve(root, "src/services/health.ts"));
    const cfg = loadConfig(config, {});
    const view = { ...cfg, upstreams: cfg.upstreams.map((u: object) => ({ ...u, onLoopback: true })) };
    const principal = { sub: "agent:summary", team: "e2e", roles: ["agent"], tools, authenticated: true };
    expect(counts(await summary(view, principal))).toEqual(through);
    // A grant that reaches none of ev's tools counts zero there; without the grant filter (the operator view) allow/deny alone decide.
    expect(counts(await summary(view, { ...principal, tools: ["open__*"] }))).toEqual({ ev: 0, open: through.open + 1 });
    expect(counts(await summary(view, { ...principal, tools: ["open__*"] }, false))).toEqual(
      counts((await (await fetch(`${origin}/summary`)).json()) as Summary),
    );
    // Through the route, upstreams the grant cannot reach are left out of the request altogether.
    const { token: openOnly } = await mintGrant(
      keys,
      { iss: origin, aud: origin, sub: "agent:summary", team: "e2e", roles: ["agent"], tools: ["open__*"], ttlSeconds: 600 },
      { maxLifetimeSeconds: 3600 },
    );
    const scoped = (await (await fetch(`${origin}/summary`, { headers: { authorization: `Bearer ${openOnly}` } })).json()) as Summary;
    expect(counts(scoped)).toEqual({ open: through.open + 1 });
    expect(byPrefix(await listed(gw.url, `Bearer ${openOnly}`))).toEqual({ ev: 0, open: through.open + 1 });
  });
});
