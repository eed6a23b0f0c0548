/**
 * The ledger on the production build: 500 concurrent governed calls through the gateway to a
 * recording upstream leave one contiguous team chain (seq 1..n, no repeated prev), D1 rows that
 * match the chain one to one, an export that verifies offline with the gateway's public keys,
 * and receipts in every answer that verify against that export; an auditor sees only its team.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import type { LedgerEntry } from "../../src/ledger/records.ts";
import { verifyExport, verifyReceipt } from "../../src/ledger/verify.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { grantFor, modern } from "./mcp.ts";

type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let upstream: Upstream;
let gw: Proc & { url: string };
let origin: string;
let jwk: string;
const CALLS = 500;

const token = async (sub: string, team: string, roles: string[], tools: string[] = []) =>
  (await grantFor(jwk, origin, { sub, team, roles: roles as never, tools, ttlSeconds: 900 })).token;

/** One governed 2026-07-28 tools/call with JSON-RPC id `id`; its answer. */
const call = (bearer: string, name: string, id: number) => modern(`${origin}/mcp`, bearer, "tools/call", { name, arguments: {} }, { id, timeoutMs: 120_000 });

beforeAll(async () => {
  upstream = await startModernOnlyUpstream();
  jwk = JSON.stringify((await generateSigningKey("ledger-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  gw = await startPortcullis(
    `
actor: local:e2e
auth:
  required: true
egress:
  allow_loopback: true
upstreams:
  - name: rec
    url: ${upstream.url}
    timeout: 60s
`,
    port,
    { PORTCULLIS_SIGNING_KEY: jwk },
  );
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), upstream?.close()]);
});

describe("the ledger through the gateway", () => {
  it(`${CALLS} concurrent calls: one contiguous chain, D1 one to one, the export and every receipt verify`, async () => {
    const agent = await token("agent:bulk", "team-bulk", ["agent"], ["*"]);
    const before = upstream.log.filter((s) => s.method === "tools/call").length;
    const answers = await Promise.all(Array.from({ length: CALLS }, (_, i) => call(agent, "bump", i + 1)));
    expect(
      answers.every((a, i) => a.id === i + 1 && a.result?.isError !== true),
      JSON.stringify(answers.find((a) => a.error || a.result?.isError)),
    ).toBe(true);
    expect(upstream.log.filter((s) => s.method === "tools/call").length - before).toBe(CALLS);
    const receipts = answers.map((a) => a.result._meta["portcullis/receipt"]);
    expect(new Set(receipts.map((r) => r.decision_id)).size).toBe(CALLS);

    const auditor = await token("human:audit", "team-bulk", ["auditor"]);
    const exp = await fetch(`${origin}/v1/ledger/export?team=team-bulk`, { headers: { authorization: `Bearer ${auditor}` } });
    expect(exp.status).toBe(200);
    const lines = (await exp.text()).split("\n").filter((l) => l !== "");
    const entries = lines
      .map((l) => JSON.parse(l))
      .filter((o) => o.entry && o.entry.chain === "team-bulk")
      .map((o) => o.entry as LedgerEntry);
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
    expect(new Set(entries.map((e) => e.prev)).size).toBe(entries.length);
    expect(entries.filter((e) => e.kind === "decision")).toHaveLength(CALLS);
    expect(entries.filter((e) => e.kind === "outcome")).toHaveLength(CALLS);
    const jwks = await (await fetch(`${origin}/.well-known/jwks.json`)).json();
    const report = await verifyExport(lines, jwks, { keep: (e) => e.chain === "team-bulk" });
    expect(report.ok, JSON.stringify(report.firstBad)).toBe(true);
    for (const r of receipts) expect(verifyReceipt(r, report).ok).toBe(true);
    // A receipt whose record is not in the export does not verify.
    expect(verifyReceipt({ ...receipts[0], seq: entries.length + 10 }, report).ok).toBe(false);

    // D1, the shared store, holds the same records one to one once the LedgerDO has flushed.
    let rows: LedgerEntry[] = [];
    for (let attempt = 0; attempt < 40; attempt++) {
      rows = [];
      let next: string | null = null;
      do {
        const page = (await (
          await fetch(`${origin}/v1/ledger?team=team-bulk&limit=1000${next ? `&after=${encodeURIComponent(next)}` : ""}`, {
            headers: { authorization: `Bearer ${auditor}` },
          })
        ).json()) as { entries: LedgerEntry[]; next: string | null };
        rows.push(...page.entries);
        next = page.next;
      } while (next);
      if (rows.length >= entries.length) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    const bySeq = new Map(rows.map((r) => [r.seq, r.hash]));
    expect(bySeq.size).toBe(entries.length);
    for (const e of entries) expect(bySeq.get(e.seq)).toBe(e.hash);

    // One call's trace: its decision and its outcome.
    const trace = await (await fetch(`${origin}/v1/ledger/${receipts[7].decision_id}/trace`, { headers: { authorization: `Bearer ${auditor}` } })).json();
    expect(trace.status).toBe("succeeded");
    expect(trace.records.map((r: LedgerEntry) => r.kind).sort()).toEqual(["decision", "outcome"]);
  }, 300_000);

  it("an auditor of another team cannot read this team's chain; an agent cannot read any", async () => {
    const other = await token("human:other", "team-other", ["auditor"]);
    const r = await fetch(`${origin}/v1/ledger/export?team=team-bulk`, { headers: { authorization: `Bearer ${other}` } });
    expect(r.status).toBe(403);
    const own = await fetch(`${origin}/v1/ledger/export`, { headers: { authorization: `Bearer ${other}` } });
    const chains = (await own.text())
      .split("\n")
      .filter((l) => l)
      .map((l) => JSON.parse(l))
      .filter((o) => o.entry)
      .map((o) => o.entry.chain);
    expect(chains.filter((c: string) => c === "team-bulk")).toEqual([]);
    const agent = await token("agent:nosy", "team-bulk", ["agent"], ["*"]);
    expect((await fetch(`${origin}/v1/ledger`, { headers: { authorization: `Bearer ${agent}` } })).status).toBe(403);
  });

  it("a denied call is recorded as blocked, and the upstream sees nothing", async () => {
    const narrow = await token("agent:narrow", "team-narrow", ["agent"], ["ask_*"]);
    const before = upstream.log.length;
    const a = await call(narrow, "bump", 1);
    expect(a.result.isError).toBe(true);
    expect(upstream.log.slice(before).filter((s) => s.method === "tools/call")).toEqual([]);
    const auditor = await token("human:audit2", "team-narrow", ["auditor"]);
    const lines = (await (await fetch(`${origin}/v1/ledger/export`, { headers: { authorization: `Bearer ${auditor}` } })).text()).split("\n").filter((l) => l);
    const blocked = lines
      .map((l) => JSON.parse(l))
      .filter((o) => o.entry?.kind === "blocked")
      .map((o) => o.entry.body);
    expect(blocked).toEqual([expect.objectContaining({ principal: "agent:narrow", tool: "bump", check: "grant" })]);
  });
});
