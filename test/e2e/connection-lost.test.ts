/**
 * A pooled upstream connection lost before any answer, on the production build: a gateway in
 * front of dropping-upstream.ts (raw HTTP/1.1, keep-alive), whose mapping says `lookup` is
 * read_only, `charge` reversible (a write) and `wipe` irreversible, and which sets no `retry`.
 * After a warm call, the upstream destroys the socket of the next call right after reading it. An
 * agent of each era (an SDK v2 client on a 2025-11-25 session, raw 2026-07-28 requests) then gets
 * the answer of the read_only tool — the gateway sent it once more at once (the upstream counted 2
 * requests for that call) and its outcome is `succeeded`, saying it was answered after one retry —
 * while a write or irreversible tool is never sent twice: the agent gets a JSON-RPC error naming
 * the upstream, the upstream counted exactly 1 request, and the outcome is `failed`. (One upstream:
 * its tools keep their own names.) Owns the gateway and upstream it starts; must never leave one
 * running, or leave loopback.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import type { LedgerEntry } from "../../src/ledger/records.ts";
import { type DroppingUpstream, startDroppingUpstream } from "./dropping-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { closeSessions, grantFor, modern, sessionClient } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const TEAM = "team-connlost";
const TIMEOUT_MS = 5000;

let upstream: DroppingUpstream;
let gw: Proc & { url: string; logs: () => string };
let origin = "";
const agents = { legacy: "", modern: "" };
let auditor = "";

beforeAll(async () => {
  upstream = await startDroppingUpstream(["lookup", "charge", "wipe"]);
  const jwk = JSON.stringify((await generateSigningKey("connlost-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  const config = `
actor: local:connlost
auth:
  required: true
egress:
  allow_loopback: true
upstreams:
  - name: dr
    url: ${upstream.url}
    timeout: ${TIMEOUT_MS}ms
mappings:
  dr:
    tools:
      lookup: { effect: read_only }
      charge: { effect: reversible }
      wipe: { effect: irreversible }
`;
  gw = await startPortcullis(config, port, { PORTCULLIS_SIGNING_KEY: jwk });
  const grant = async (sub: string, roles: string[], tools: string[] = []) =>
    (await grantFor(jwk, origin, { sub, team: TEAM, roles: roles as never, tools, ttlSeconds: 3600 })).token;
  agents.legacy = await grant("agent:legacy", ["agent"], ["*"]);
  agents.modern = await grant("agent:modern", ["agent"], ["*"]);
  auditor = await grant("human:auditor", ["auditor"]);
}, 240_000);

afterEach(async () => {
  await closeSessions();
});

afterAll(async () => {
  await Promise.allSettled([gw?.stop(), upstream?.close()]);
});

type Era = "legacy" | "modern";
const principalOf = (era: Era) => `agent:${era}`;

/** One tools/call of `name` as an agent of `era`: the result's text, or the error it got (a JSON-RPC error or an isError result). */
async function callAs(era: Era, name: string): Promise<{ text: string | null; error: string | null }> {
  if (era === "modern") {
    const a: Any = await modern(`${origin}/mcp`, agents.modern, "tools/call", { name, arguments: {} }, { timeoutMs: 60_000 });
    if (a.error) return { text: null, error: String(a.error.message) };
    return a.result?.isError ? { text: null, error: JSON.stringify(a.result.content) } : { text: a.result?.content?.[0]?.text ?? "", error: null };
  }
  const client = await sessionClient("connlost", `${origin}/mcp`, agents.legacy);
  try {
    const r: Any = await client.callTool({ name, arguments: {} }, { timeout: 60_000 });
    return r.isError ? { text: null, error: JSON.stringify(r.content) } : { text: r.content?.[0]?.text ?? "", error: null };
  } catch (e) {
    return { text: null, error: (e as Error).message };
  }
}

/** The decisions of `principal` for dr's `tool`, in chain order, each with its outcome (read from the team's LedgerDO export). */
async function recordsOf(principal: string, tool: string): Promise<{ decision: Any; outcome: Any }[]> {
  const r = await fetch(`${origin}/v1/ledger/export?team=${TEAM}`, { headers: { authorization: `Bearer ${auditor}` }, signal: AbortSignal.timeout(30_000) });
  expect(r.status).toBe(200);
  const entries = (await r.text())
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l))
    .filter((o) => o.entry?.chain === TEAM)
    .map((o) => o.entry as LedgerEntry);
  const outcomes = new Map(entries.filter((e) => e.kind === "outcome").map((e) => [(e.body as Any).decision_id, e.body as Any]));
  return entries
    .filter((e) => e.kind === "decision" && (e.body as Any).principal === principal && (e.body as Any).upstream === "dr" && (e.body as Any).tool === tool)
    .map((e) => ({ decision: { id: e.id, ...(e.body as Any) }, outcome: outcomes.get(e.id) }));
}

describe("a connection lost before any answer: safe tools are sent once more, others never", () => {
  for (const era of ["legacy", "modern"] as const) {
    it(`read_only (${era} agent): the agent gets the answer; the upstream saw the call twice; the outcome is succeeded, after one retry`, async () => {
      const warm = await callAs(era, "lookup");
      expect(warm.error).toBeNull();
      const before = upstream.calls.get("lookup") ?? 0;
      expect(warm.text).toBe(`lookup #${before}`);
      upstream.drop("lookup", before + 1);
      const seen = await callAs(era, "lookup");
      expect(seen.error, "the read_only call was answered").toBeNull();
      // The dropped request (#before+1) and the retry that answered (#before+2).
      expect(seen.text).toBe(`lookup #${before + 2}`);
      expect(upstream.calls.get("lookup")).toBe(before + 2);
      const recs = await recordsOf(principalOf(era), "lookup");
      expect(recs).toHaveLength(2);
      expect(recs[0]!.outcome).toMatchObject({ status: "succeeded", reason: null });
      expect(recs[1]!.decision.decision).toBe("allow");
      expect(recs[1]!.outcome.status).toBe("succeeded");
      expect(recs[1]!.outcome.reason).toMatch(/^answered after one retry: the first attempt's connection was lost \(upstream dr: unreachable \(/);
      expect(gw.logs()).not.toContain("internal error on the upstream leg");
    });

    for (const tool of ["charge", "wipe"] as const) {
      it(`${tool === "charge" ? "a write (reversible)" : "irreversible"} (${era} agent): a JSON-RPC error naming the upstream; the upstream saw the call once; the outcome is failed`, async () => {
        const warm = await callAs(era, tool);
        expect(warm.error).toBeNull();
        const before = upstream.calls.get(tool) ?? 0;
        upstream.drop(tool, before + 1);
        const seen = await callAs(era, tool);
        expect(seen.text).toBeNull();
        // What workerd's fetch says of a connection closed before any response header.
        expect(seen.error).toMatch(/upstream dr: unreachable \(Network connection lost\.\)/);
        expect(upstream.calls.get(tool)).toBe(before + 1);
        const recs = await recordsOf(principalOf(era), tool);
        expect(recs).toHaveLength(2);
        expect(recs[1]!.outcome.status).toBe("failed");
        expect(recs[1]!.outcome.reason).toMatch(/^upstream dr: unreachable \(/);
        expect(recs[1]!.outcome.reason).not.toContain("retry");
        // The next call is served as usual (no drop asked for it).
        expect((await callAs(era, tool)).text).toBe(`${tool} #${before + 2}`);
      });
    }
  }

  it("the upstream kept its connections alive (the gateway reused at least one) and dropped exactly the calls it was told to", () => {
    const total = [...upstream.calls.values()].reduce((a, b) => a + b, 0);
    expect(upstream.connections()).toBeLessThan(total);
    expect(Object.fromEntries(upstream.dropped)).toEqual({ lookup: 2, charge: 2, wipe: 2 });
  });
});
