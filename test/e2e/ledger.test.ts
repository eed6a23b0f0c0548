/**
 * The ledger on the production build: 500 concurrent governed calls through the gateway to a
 * recording upstream leave one contiguous team chain (seq 1..n, no repeated prev), D1 rows that
 * match the chain one to one, an export that verifies offline with the gateway's public keys,
 * and receipts in every answer that verify against that export; an auditor sees only its team.
 * And `portcullis ledger verify` on a real export, fetched at once: VALID without any flag (the
 * export ends each chain with a signed checkpoint), while every forgery an attacker holding the
 * file could make — checkpoints stripped, a blocked record rewritten and the chain re-hashed, a
 * made-up call appended, the header's gateway swapped, the `_global` chain dropped — exits 1 with
 * a reason, with and without --receipt.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { chainEntries } from "../../src/ledger/chain.ts";
import type { LedgerEntry } from "../../src/ledger/records.ts";
import { verifyExport } from "../../src/ledger/export-verifier.ts";
import { verifyReceipt } from "../../src/ledger/receipt.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { grantFor, modern, runScript } from "./mcp.ts";

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

describe("portcullis ledger verify on a real export, and on forgeries of it", () => {
  const CLI = join(import.meta.dirname, "../../cli/ledger.ts");
  const TEAM = "team-forge";
  let dir: string;
  let auditor: string;
  let receipt: { chain: string; seq: number; hash: string; decision_id: string };
  let lines: string[];
  const file = (name: string) => join(dir, name);
  const write = (name: string, ls: string[]) => {
    writeFileSync(file(name), `${ls.join("\n")}\n`);
    return file(name);
  };
  const parsed = (l: string) => JSON.parse(l) as { export?: Record<string, unknown>; entry?: LedgerEntry; checkpoint?: unknown };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "portcullis-forgery-"));
    const agent = await token("agent:forger", TEAM, ["agent"], ["bump"]);
    const ok = await call(agent, "bump", 1);
    expect(ok.result, JSON.stringify(ok).slice(0, 2000)).toBeDefined();
    expect(ok.result?.isError).not.toBe(true);
    receipt = ok.result._meta["portcullis/receipt"];
    const denied = await call(agent, "ask_anything", 2); // outside the grant: a blocked record
    expect(denied.result?.isError).toBe(true);
    auditor = await token("human:forge-audit", TEAM, ["auditor"]);
    // Exported at once: well inside the gateway's 10 s checkpoint cadence.
    const exp = await runScript(CLI, ["export", "--url", origin, "--out", file("real.ndjson")], { PORTCULLIS_TOKEN: auditor });
    expect(exp.code, exp.stderr).toBe(0);
    lines = readFileSync(file("real.ndjson"), "utf8")
      .split("\n")
      .filter((l) => l !== "");
    writeFileSync(file("jwks.json"), await (await fetch(`${origin}/.well-known/jwks.json`)).text());
    writeFileSync(file("receipt.json"), JSON.stringify(receipt));
  }, 120_000);
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const verify = (f: string, ...extra: string[]) => runScript(CLI, ["verify", "--file", f, "--key", file("jwks.json"), "--quiet", ...extra]);

  it("the export as fetched: VALID, every chain anchored, the receipt proven — no flag needed", async () => {
    const r = await verify(file("real.ndjson"), "--receipt", file("receipt.json"));
    expect(r.code, r.stdout).toBe(0);
    expect(r.stdout).toContain(`export of ${origin}`);
    expect(r.stdout).toMatch(new RegExp(`${TEAM}\\s+(\\d+)\\s+\\1\\s+0\\n`));
    expect(r.stdout).toContain(`receipt ${TEAM} seq ${receipt.seq}`);
    expect(r.stdout).toContain("under a signed checkpoint");
    const byUrl = await runScript(CLI, ["verify", "--url", origin, "--quiet", "--receipt", file("receipt.json")], { PORTCULLIS_TOKEN: auditor });
    expect(byUrl.code, byUrl.stdout).toBe(0);
    expect(byUrl.stdout).toContain("VALID");
  });

  /** The team chain's entries as exported, and a helper that re-chains drafts after a seq. */
  const team = () => lines.map(parsed).flatMap((o) => (o.entry?.chain === TEAM ? [o.entry] : []));
  const withoutCheckpoints = (ls: string[]) => ls.filter((l) => !l.startsWith('{"checkpoint"'));
  const replaceTeam = (ls: string[], entries: LedgerEntry[]) => {
    const out = ls.filter((l) => parsed(l).entry?.chain !== TEAM);
    const header = out.findIndex((l) => l.startsWith('{"export"'));
    return [...out.slice(0, header + 1), ...entries.map((entry) => JSON.stringify({ entry })), ...out.slice(header + 1)];
  };

  it("forgeries exit 1 with a reason, with and without --receipt", async () => {
    const es = team();
    const blocked = es.find((e) => e.kind === "blocked")!;
    expect(blocked).toBeTruthy();
    // 1. Every signed checkpoint removed.
    const stripped = write("stripped.ndjson", withoutCheckpoints(lines));
    // 2. The blocked record rewritten (it now says the call was allowed to another tool), the chain re-hashed from there, checkpoints removed.
    const rewrittenTail = chainEntries(
      TEAM,
      { seq: blocked.seq - 1, hash: blocked.prev },
      es.slice(blocked.seq - 1).map((e) => (e.seq === blocked.seq ? { ...e, body: { ...e.body, tool: "read_only_lookup", reason: "nothing happened" } } : e)),
    );
    const rewritten = write("rewritten.ndjson", withoutCheckpoints(replaceTeam(lines, [...es.slice(0, blocked.seq - 1), ...rewrittenTail])));
    // 3. A made-up transfer_money call appended (decision and outcome, chained onto the real head), and a receipt for it.
    const head = es.at(-1)!;
    const made = chainEntries(TEAM, { seq: head.seq, hash: head.hash }, [
      {
        kind: "decision",
        id: "forged-decision",
        at: new Date().toISOString(),
        body: { principal: "agent:forger", team: TEAM, upstream: "rec", tool: "transfer_money", arguments: { to: "mallory", amount: 1e6 }, decision: "allow" },
      },
      { kind: "outcome", id: "forged-outcome", at: new Date().toISOString(), body: { decision_id: "forged-decision", status: "succeeded" } },
    ]);
    const appended = write("appended.ndjson", replaceTeam(lines, [...es, ...made]));
    const forgedReceipt = JSON.stringify({ chain: TEAM, seq: made[1]!.seq, hash: made[1]!.hash, decision_id: "forged-decision" });
    // 4. The header's gateway swapped for another.
    const swapped = write(
      "swapped.ndjson",
      lines.map((l) => (l.startsWith('{"export"') ? l.replace(JSON.stringify(origin), JSON.stringify("https://gateway.attacker.example")) : l)),
    );
    // 5. No _global chain: its lines gone and the header no longer lists it.
    const noGlobal = write(
      "no-global.ndjson",
      lines
        .filter((l) => (parsed(l).entry?.chain ?? (parsed(l).checkpoint as { chain?: string } | undefined)?.chain) !== "_global")
        .map((l) => (l.startsWith('{"export"') ? l.replace('"_global",', "") : l)),
    );
    expect(readFileSync(noGlobal, "utf8")).not.toContain('"_global"');

    const cases: [string, string, RegExp][] = [
      ["checkpoints stripped", stripped, /unanchored: entries 1\.\.\d+ of _global|unanchored: entries 1\.\.\d+ of team-forge/],
      ["rewritten and re-hashed", rewritten, /differ from what was signed|unanchored/],
      ["a call appended", appended, new RegExp(`unanchored: entries ${made[0]!.seq}\\.\\.${made[1]!.seq} of ${TEAM}`)],
      ["header swapped", swapped, /header names gateway https:\/\/gateway\.attacker\.example, the signature another/],
      ["no _global", noGlobal, /lists no _global chain/],
    ];
    for (const [what, f, reason] of cases) {
      for (const extra of [[], ["--receipt", file("receipt.json")], ["--receipt", forgedReceipt]]) {
        const r = await verify(f, ...extra);
        expect(r.code, `${what} ${extra.join(" ")}: ${r.stdout}`).toBe(1);
        expect(r.stdout, what).toContain("INVALID");
        expect(r.stdout, what).toMatch(reason);
        if (extra.length) expect(r.stdout, what).toContain("NOT PROVEN");
      }
    }
    // Accepting a tail knowingly: the appended export is then VALID with the count, but the made-up call's receipt is still not proven.
    const tail = await verify(appended, "--allow-unanchored-tail", "--receipt", forgedReceipt);
    expect(tail.code).toBe(1);
    expect(tail.stdout).toContain("VALID");
    expect(tail.stdout).toContain("accepted with --allow-unanchored-tail: 2 entries");
    expect(tail.stdout).toMatch(/NOT PROVEN: the entry team-forge seq \d+ is not under a signed checkpoint/);
    // The stripped export stays INVALID with the flag: _global's commitments still sign team-forge, but nothing signs _global's entries… and with no signature at all, nothing is proven.
    const bare = write(
      "bare.ndjson",
      withoutCheckpoints(lines).filter((l) => parsed(l).entry?.chain !== "_global"),
    );
    const none = await verify(bare, "--allow-unanchored-tail");
    expect(none.code, none.stdout).toBe(1);
    expect(none.stdout).toContain("no checkpoint signed by the given keys verified");
  });

  it("keys fetched from --url belong to that gateway: an export naming another is refused unless --gateway says so", async () => {
    // Another gateway's URL for the same keys: the keys are this gateway's, the header names this gateway.
    const other = await runScript(CLI, ["verify", "--file", file("real.ndjson"), "--key", file("jwks.json"), "--gateway", "https://other.example", "--quiet"]);
    expect(other.code).toBe(1);
    expect(other.stdout).toContain(`the export's header names gateway ${origin}, not https://other.example`);
    const same = await runScript(CLI, ["verify", "--file", file("real.ndjson"), "--key", file("jwks.json"), "--gateway", `${origin}/`, "--quiet"]);
    expect(same.code, same.stdout).toBe(0);
  });
});
