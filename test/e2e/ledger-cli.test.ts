/**
 * `portcullis ledger` in Node, as an auditor runs it (no gateway needed): a seeded export over two
 * team chains and `_global` written to a temp file verifies (exit 0, entries and anchored size per
 * chain); one with an unanchored tail does not unless --allow-unanchored-tail accepts it (counted),
 * and a receipt in that tail is never proven; a tampered copy does not (exit 1, first bad seq and reason); `--json`
 * carries the same verdict; receipts are proven or refused; a long export shows progress on
 * stderr; and the `--url` forms (verify, export, trace) fetch from a loopback stand-in for the
 * gateway with the token from PORTCULLIS_TOKEN, never printing it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { chainEntries, EMPTY_HEAD } from "../../src/ledger/chain.ts";
import { checkpointOrigin, signCheckpoint, signingKeyFrom } from "../../src/ledger/checkpoint.ts";
import type { EntryDraft, LedgerEntry } from "../../src/ledger/records.ts";
import { type Run, runScript } from "./mcp.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const CLI = join(ROOT, "cli/ledger.ts");
const GW = "https://gw.example.com";
const TOKEN = "auditor-token-not-for-printing";

/** Runs the CLI with Node 22 (this process's), a clean token environment, and a time limit. */
const cli = (args: string[], env: Record<string, string> = {}): Promise<Run> => runScript(CLI, args, env);

/**
 * A seeded export: team-a (110 entries, checkpoints at 32/64/96 and its head — or, with `tail`,
 * not at its head: 14 unanchored), team-b (90, anchored at its head), `_global`.
 */
async function seededExport(pair: { privateJwk: JsonWebKey }, sizes: Record<string, number> = { "team-a": 110, "team-b": 90 }, tail = false) {
  const key = signingKeyFrom(JSON.stringify(pair.privateJwk));
  let x = 42;
  const rand = () => {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    return x / 2 ** 31;
  };
  const entries: Record<string, LedgerEntry[]> = {};
  const lines: string[] = [];
  const commits: EntryDraft[] = [];
  for (const [chain, count] of Object.entries(sizes)) {
    const drafts: EntryDraft[] = [];
    for (let i = 0; i < count; i++) {
      const at = new Date(Date.UTC(2026, 11, 1) + i * 1000).toISOString();
      if (i % 2 === 0)
        drafts.push({
          kind: "decision",
          id: `${chain}-d${i}`,
          at,
          body: {
            principal: "alice",
            team: chain,
            run: null,
            upstream: "alpha",
            tool: "echo",
            arguments: { sha256: "ab".repeat(32) },
            arguments_mode: "hashed",
            classification: { effect: "read_only" },
            decision: "allow",
            rule: null,
            reason: `r${Math.floor(rand() * 1000)}`,
            mode: "enforce",
            policy_version: "v1",
            obligations: [],
            hold_id: null,
          },
        });
      else
        drafts.push({
          kind: "outcome",
          id: `${chain}-o${i}`,
          at,
          body: {
            decision_id: `${chain}-d${i - 1}`,
            status: "succeeded",
            result_hash: "cd".repeat(32),
            duration_ms: Math.floor(rand() * 500),
            obligations_applied: [],
            reason: null,
          },
        });
    }
    const es = chainEntries(chain, EMPTY_HEAD, drafts);
    entries[chain] = es;
    for (const e of es) lines.push(JSON.stringify({ entry: e }));
    const sizesToSign = chain === "team-a" ? [...new Set([32, 64, 96, ...(tail ? [] : [count])])].filter((s) => s <= count) : [count];
    for (const size of sizesToSign) {
      const e = es[size - 1]!;
      const note = await signCheckpoint(checkpointOrigin(GW, chain), size, e.hash, key);
      lines.push(JSON.stringify({ checkpoint: { chain, size, hash: e.hash, at: e.at, note } }));
      commits.push({ kind: "checkpoint", id: `checkpoint:${chain}:${size}`, at: e.at, body: { chain, size, hash: e.hash, note } });
    }
  }
  const g = chainEntries("_global", EMPTY_HEAD, commits);
  entries._global = g;
  for (const e of g) lines.push(JSON.stringify({ entry: e }));
  const head = g.at(-1)!;
  lines.push(
    JSON.stringify({
      checkpoint: {
        chain: "_global",
        size: head.seq,
        hash: head.hash,
        at: head.at,
        note: await signCheckpoint(checkpointOrigin(GW, "_global"), head.seq, head.hash, key),
      },
    }),
  );
  const header = JSON.stringify({ export: { v: 1, gateway: GW, generated_at: "2026-12-02T00:00:00.000Z", chains: [...Object.keys(sizes), "_global"] } });
  return { lines: [header, ...lines], entries };
}

const ndjson = (lines: string[]) => `${lines.join("\n")}\n`;

let dir: string;
let fx: Awaited<ReturnType<typeof seededExport>>;
let publicJwk: JsonWebKey;
const file = (name: string) => join(dir, name);

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "portcullis-ledger-cli-"));
  const pair = await generateSigningKey("ledger-1");
  publicJwk = pair.publicJwk;
  fx = await seededExport(pair);
  writeFileSync(file("export.ndjson"), ndjson(fx.lines));
  writeFileSync(file("tail.ndjson"), ndjson((await seededExport(pair, undefined, true)).lines));
  writeFileSync(file("jwks.json"), JSON.stringify({ keys: [pair.publicJwk] }));
  // team-a seq 58 (the outcome of decision team-a-d56, seq 57) changed in place: one byte of its body.
  const i = fx.lines.findIndex((l) => l.startsWith('{"entry":{"v":1,"chain":"team-a","seq":58,'));
  const tampered = [...fx.lines];
  tampered[i] = tampered[i]!.replace('"status":"succeeded"', '"status":"succeedeD"');
  expect(tampered[i]).not.toBe(fx.lines[i]);
  writeFileSync(file("tampered.ndjson"), ndjson(tampered));
  writeFileSync(file("removed.ndjson"), ndjson(fx.lines.filter((_, j) => j !== i)));
  const o = fx.entries["team-a"]![57]!;
  writeFileSync(
    file("receipt.json"),
    JSON.stringify({
      content: [{ type: "text", text: "ok" }],
      _meta: { "portcullis/receipt": { chain: "team-a", seq: 58, hash: o.hash, decision_id: o.body.decision_id } },
    }),
  );
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("portcullis ledger verify --file", () => {
  it("a valid export: exit 0, entries and anchored size per chain", async () => {
    const r = await cli(["verify", "--file", file("export.ndjson"), "--key", file("jwks.json")]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`export of ${GW}, generated 2026-12-02T00:00:00.000Z: VALID`);
    expect(r.stdout).toMatch(/team-a\s+110\s+110\s+0\n/);
    expect(r.stdout).toMatch(/team-b\s+90\s+90\s+0\n/);
    expect(r.stdout).toMatch(/_global\s+5\s+5\s+0\n/);
  });

  it("an unanchored tail: exit 1 naming the range; --allow-unanchored-tail accepts it with its count; a receipt in it is never proven", async () => {
    const r = await cli(["verify", "--file", file("tail.ndjson"), "--key", file("jwks.json")]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("INVALID");
    expect(r.stdout).toContain("first bad: team-a seq 97: unanchored: entries 97..110 of team-a (14) are under no checkpoint signed by the given keys");
    const ok = await cli(["verify", "--file", file("tail.ndjson"), "--key", file("jwks.json"), "--allow-unanchored-tail"]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("VALID");
    expect(ok.stdout).toMatch(/team-a\s+110\s+96\s+14\n/);
    expect(ok.stdout).toContain("warning: accepted an unanchored tail of team-a: seq 97..110 (14 entries) under no signed checkpoint");
    expect(ok.stdout).toContain("accepted with --allow-unanchored-tail: 14 entries chained, but under no signed checkpoint yet");
    const receipt = JSON.stringify({ chain: "team-a", seq: 101, hash: fx.entries["team-a"]![100]!.hash, decision_id: "team-a-d100" });
    const inTail = await cli(["verify", "--file", file("tail.ndjson"), "--key", file("jwks.json"), "--allow-unanchored-tail", "--json", "--receipt", receipt]);
    expect(inTail.code).toBe(1);
    expect(JSON.parse(inTail.stdout)).toMatchObject({
      ok: true,
      unanchoredAccepted: 14,
      receipt: { ok: false, reason: expect.stringMatching(/not under a signed checkpoint/) },
    });
  });

  it("a tampered copy: exit 1 with the first bad seq and the reason", async () => {
    const r = await cli(["verify", "--file", file("tampered.ndjson"), "--key", file("jwks.json")]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("INVALID");
    expect(r.stdout).toContain("first bad: team-a seq 58 (line 59): hash does not match the entry's content");
    const removed = await cli(["verify", "--file", file("removed.ndjson"), "--key", file("jwks.json")]);
    expect(removed.code).toBe(1);
    expect(removed.stdout).toContain("first bad: team-a seq 58 (line 59): expected seq 58, found seq 59");
  });

  it("--json: the report, with the same verdict", async () => {
    const ok = await cli(["verify", "--file", file("export.ndjson"), "--key", file("jwks.json"), "--json"]);
    expect(ok.code).toBe(0);
    const good = JSON.parse(ok.stdout);
    expect(good).toMatchObject({
      ok: true,
      lines: fx.lines.length,
      problems: [],
      chains: { "team-a": { entries: 110, anchored: 110, unanchored: 0 }, "team-b": { entries: 90, anchored: 90, unanchored: 0 } },
    });
    expect(good.header).toEqual({ v: 1, gateway: GW, generated_at: "2026-12-02T00:00:00.000Z", chains: ["team-a", "team-b", "_global"] });
    const bad = await cli(["verify", "--file", file("tampered.ndjson"), "--key", file("jwks.json"), "--json"]);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stdout)).toMatchObject({
      ok: false,
      firstBad: { chain: "team-a", seq: 58, line: 59, reason: "hash does not match the entry's content" },
    });
  });

  it("--receipt: proven in the verified export; refused when its record was removed or changed", async () => {
    const ok = await cli(["verify", "--file", file("export.ndjson"), "--key", file("jwks.json"), "--receipt", file("receipt.json")]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("receipt team-a seq 58 (decision team-a-d56): in the export (outcome), under a signed checkpoint");
    const inline = await cli([
      "verify",
      "--file",
      file("export.ndjson"),
      "--key",
      file("jwks.json"),
      "--json",
      "--receipt",
      JSON.stringify({ chain: "team-a", seq: 101, hash: fx.entries["team-a"]![100]!.hash, decision_id: "team-a-d100" }),
    ]);
    expect(inline.code).toBe(0);
    expect(JSON.parse(inline.stdout).receipt).toEqual({ ok: true, chain: "team-a", seq: 101, kind: "decision", anchored: true });
    for (const f of ["removed.ndjson", "tampered.ndjson"]) {
      const r = await cli(["verify", "--file", file(f), "--key", file("jwks.json"), "--receipt", file("receipt.json")]);
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(/receipt team-a seq 58 \(decision team-a-d56\): NOT PROVEN: the export does not verify/);
    }
    const wrong = await cli([
      "verify",
      "--file",
      file("export.ndjson"),
      "--key",
      file("jwks.json"),
      "--receipt",
      JSON.stringify({ chain: "team-a", seq: 58, hash: "0".repeat(64), decision_id: "team-a-d56" }),
    ]);
    expect(wrong.code).toBe(1);
    expect(wrong.stdout).toContain("NOT PROVEN");
  });

  it("--checkpoint: a checkpoint saved earlier catches an export truncated below it", async () => {
    const cp = JSON.parse(fx.lines.find((l) => l.includes('"checkpoint":{"chain":"team-a","size":96'))!).checkpoint;
    writeFileSync(file("cp96.note"), cp.note);
    const cut = fx.lines.filter(
      (l) =>
        !l.startsWith('{"entry":{"v":1,"chain":"_global"') &&
        !l.startsWith('{"checkpoint":{"chain":"_global"') &&
        !l.includes('"size":96') &&
        !l.includes('{"checkpoint":{"chain":"team-a","size":110') &&
        !/"chain":"team-a","seq":(8[1-9]|9\d|1\d\d),/.test(l),
    );
    writeFileSync(file("cut.ndjson"), ndjson(cut));
    // On its own the cut export looks like one with a tail (team-a anchored at 64, holding 80).
    expect((await cli(["verify", "--file", file("cut.ndjson"), "--key", file("jwks.json"), "--allow-unanchored-tail"])).code).toBe(0);
    const r = await cli(["verify", "--file", file("cut.ndjson"), "--key", file("jwks.json"), "--allow-unanchored-tail", "--checkpoint", file("cp96.note")]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("first bad: team-a seq 81: truncated: the checkpoint you gave (#1) covers 96 entries of team-a, the export holds 80");
  });

  it("shows progress on stderr for a long export, every 10,000 lines", async () => {
    const pair = await generateSigningKey("ledger-2");
    const big = await seededExport(pair, { "team-a": 96, "team-c": 21_000 });
    writeFileSync(file("big.ndjson"), ndjson(big.lines));
    writeFileSync(file("big-key.json"), JSON.stringify(pair.privateJwk)); // a private JWK: only its public part is used
    const r = await cli(["verify", "--file", file("big.ndjson"), "--key", file("big-key.json")]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("portcullis ledger verify: 10000 lines read\nportcullis ledger verify: 20000 lines read\n");
    expect(r.stdout).toMatch(/team-c\s+21000\s+21000\s+0\n/);
    const quiet = await cli(["verify", "--file", file("big.ndjson"), "--key", file("big-key.json"), "--quiet", "--json"]);
    expect(quiet.stderr).toBe("");
    expect(JSON.parse(quiet.stdout).ok).toBe(true);
  });

  it("usage errors exit 2", async () => {
    for (const args of [
      [],
      ["nonsense"],
      ["verify"],
      ["verify", "--file", file("export.ndjson")],
      ["verify", "--file", file("missing.ndjson"), "--key", file("jwks.json")],
      ["verify", "--file", file("export.ndjson"), "--key", file("export.ndjson")],
      ["verify", "--bogus"],
      ["verify", "--file", file("export.ndjson"), "--key", file("jwks.json"), "--receipt", "{}"],
      ["trace"],
    ]) {
      const r = await cli(args);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
    }
    for (const cmd of ["verify", "export", "trace"]) {
      const h = await cli([cmd, "--help"]);
      expect(h.code).toBe(0);
      expect(h.stdout).toContain(`usage: portcullis ledger ${cmd}`);
    }
    expect((await cli(["--help"])).stdout).toContain("PORTCULLIS_TOKEN");
  });
});

describe("portcullis ledger --url (a loopback stand-in for the gateway)", () => {
  let server: Server;
  let url: string;
  const seen: { path: string; auth: string | undefined }[] = [];
  beforeAll(async () => {
    server = createServer((req, res) => {
      seen.push({ path: req.url ?? "", auth: req.headers.authorization });
      const u = new URL(req.url ?? "/", "http://x");
      if (u.pathname === "/.well-known/jwks.json") return res.end(JSON.stringify({ keys: [publicJwk] }));
      if (req.headers.authorization !== `Bearer ${TOKEN}`) {
        res.writeHead(401, { "content-type": "application/json" });
        return res.end(JSON.stringify({ error: "the grant is not valid" }));
      }
      if (u.pathname === "/v1/ledger/export") {
        res.writeHead(200, { "content-type": "application/x-ndjson" });
        // Streamed in small pieces, as the gateway does.
        const body = Buffer.from(ndjson(fx.lines));
        let i = 0;
        const next = () => {
          if (i >= body.length) return res.end();
          const piece = body.subarray(i, i + 4096);
          i += 4096;
          res.write(piece, next);
        };
        return next();
      }
      if (u.pathname === "/v1/ledger/team-a-d56/trace") {
        const records = fx.entries["team-a"]!.filter((e) => e.id === "team-a-d56" || e.body.decision_id === "team-a-d56");
        return res.end(JSON.stringify({ chain: "team-a", id: "team-a-d56", status: "succeeded", records }));
      }
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "no such record" }));
    });
    await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((ok) => server.close(() => ok())));

  it("verify --url: fetches the export with the token from PORTCULLIS_TOKEN, and the JWKS without it", async () => {
    seen.length = 0;
    // The stand-in serves keys at its own URL and an export whose header names GW: --gateway says these keys are GW's.
    const r = await cli(["verify", "--url", `${url}/mcp`, "--team", "team-a", "--gateway", GW], { PORTCULLIS_TOKEN: TOKEN });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("VALID");
    expect(seen).toEqual([
      { path: "/.well-known/jwks.json", auth: undefined },
      { path: "/v1/ledger/export?team=team-a", auth: `Bearer ${TOKEN}` },
    ]);
    const withFlag = await cli(["verify", "--url", url, "--token", TOKEN, "--key", file("jwks.json"), "--json"]);
    expect(withFlag.code).toBe(0);
    expect(JSON.parse(withFlag.stdout).ok).toBe(true);
    // Keys fetched from one gateway, an export naming another: refused.
    const other = await cli(["verify", "--url", url, "--quiet"], { PORTCULLIS_TOKEN: TOKEN });
    expect(other.code).toBe(1);
    expect(other.stdout).toContain(`the export's header names gateway ${GW}, not ${url}/ (whose keys these are)`);
  });

  it("a refused token or an unreachable gateway: exit 3, the reason, never the token", async () => {
    const r = await cli(["verify", "--url", url], { PORTCULLIS_TOKEN: `${TOKEN}-wrong` });
    expect(r.code).toBe(3);
    expect(r.stderr).toContain("/v1/ledger/export → 401: the grant is not valid");
    expect(r.stdout + r.stderr).not.toContain(TOKEN);
    const none = await cli(["verify", "--url", url]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("PORTCULLIS_TOKEN");
    const closed = createServer();
    await new Promise<void>((ok) => closed.listen(0, "127.0.0.1", ok));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((ok) => closed.close(() => ok()));
    const down = await cli(["export", "--url", `http://127.0.0.1:${port}`], { PORTCULLIS_TOKEN: TOKEN });
    expect(down.code).toBe(3);
    expect(down.stderr).toContain(
      `portcullis ledger export: cannot reach the gateway at http://127.0.0.1:${port}/v1/ledger/export (connection refused): is it running? (npx portcullis dev --config FILE, or npx portcullis start)`,
    );
  });

  it("export --out streams the NDJSON to a file (or stdout); trace prints one call", async () => {
    const r = await cli(["export", "--url", url, "--out", file("fetched.ndjson")], { PORTCULLIS_TOKEN: TOKEN });
    expect(r.code).toBe(0);
    expect(readFileSync(file("fetched.ndjson"), "utf8")).toBe(ndjson(fx.lines));
    expect(r.stderr).toMatch(new RegExp(`wrote ${fx.lines.length} lines \\(\\d+ bytes\\) to `));
    const j = await cli(["export", "--url", url, "--out", file("fetched2.ndjson"), "--json"], { PORTCULLIS_TOKEN: TOKEN });
    expect(JSON.parse(j.stdout)).toEqual({ out: file("fetched2.ndjson"), bytes: Buffer.byteLength(ndjson(fx.lines)), lines: fx.lines.length });
    const out = await cli(["export", "--url", url], { PORTCULLIS_TOKEN: TOKEN });
    expect(out.stdout).toBe(ndjson(fx.lines));
    const t = await cli(["trace", "team-a-d56", "--url", url], { PORTCULLIS_TOKEN: TOKEN });
    expect(t.code).toBe(0);
    expect(t.stdout).toMatch(
      /^call team-a-d56 \(chain team-a\): succeeded\n\s+seq\s+57\s+decision\s+\S+\s+alice → alpha\/echo: allow\n\s+seq\s+58\s+outcome\s+\S+\s+succeeded in \d+ ms\n$/,
    );
    const tj = await cli(["trace", "team-a-d56", "--url", url, "--json"], { PORTCULLIS_TOKEN: TOKEN });
    expect(JSON.parse(tj.stdout).records.map((e: LedgerEntry) => e.seq)).toEqual([57, 58]);
    const missing = await cli(["trace", "nope-nope-nope", "--url", url], { PORTCULLIS_TOKEN: TOKEN });
    expect(missing.code).toBe(3);
    expect(missing.stderr).toContain("404: no such record");
  });
});
