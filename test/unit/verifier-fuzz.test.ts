/**
 * The offline ledger verifier under fuzzing (fast-check), exactly as the CLI drives it
 * (cli/ledger.ts: `verifyExport(ndjsonLines(bytes), jwks)` from src/ledger/export-verifier.ts, and
 * `verifyReceipt` on its report): arbitrary bytes, arbitrary text lines, arbitrary NDJSON behind a
 * well-formed header, entry-shaped lines with arbitrary fields, arbitrary key sets, and a real
 * valid export (built with the chain and checkpoint code the LedgerDO uses: two team chains
 * anchored at their heads and a `_global` chain committing their signed checkpoints) altered by
 * random byte and line mutations. Properties: the verifier never throws and always answers with a
 * report whose every problem has a reason; nothing but the unmodified export (or a copy that
 * parses to the same entries and signed checkpoints, e.g. JSON whitespace) verifies; a receipt
 * never verifies against a report that is not ok. Owns nothing of the verifier; must never
 * weaken an oracle to make a run pass.
 */
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { chainEntries, EMPTY_HEAD } from "../../src/ledger/chain.ts";
import { type Checkpoint, checkpointOrigin, signCheckpoint, signingKeyFrom, verifyCheckpoint } from "../../src/ledger/checkpoint.ts";
import type { EntryDraft, LedgerEntry } from "../../src/ledger/records.ts";
import { type ExportReport, ndjsonLines } from "../../src/ledger/export-format.ts";
import { verifyExport } from "../../src/ledger/export-verifier.ts";
import { verifyReceipt } from "../../src/ledger/receipt.ts";
import { canonicalJson } from "../../src/wire/canonical.ts";
import type { JsonObject } from "../../src/wire/jsonrpc.ts";

const GW = "https://gw.example.com";
const enc = new TextEncoder();

interface ValidExport {
  text: string;
  lines: string[];
  jwks: { keys: JsonWebKey[] };
  entries: LedgerEntry[];
}

/** Drafts of one team chain: decisions with outcomes, a blocked call, a listing (what the gateway writes per call). */
function drafts(chain: string, calls: number): EntryDraft[] {
  const out: EntryDraft[] = [];
  const t0 = Date.UTC(2026, 11, 1, 12);
  for (let i = 0; i < calls; i++) {
    const at = (k: number) => new Date(t0 + i * 1000 + k).toISOString();
    const id = `${chain}-d${i}`;
    out.push({
      kind: "decision",
      id,
      at: at(0),
      body: {
        principal: i % 2 ? "agent:ci" : "zoë@example.com",
        team: chain,
        run: i % 3 ? `run-${i % 4}` : null,
        upstream: "alpha",
        tool: i % 2 ? "deploy_prod" : "fs.read",
        arguments: i % 4 === 0 ? { path: "/srv/données", n: i, big: 1e21, note: "tab\there 😀" } : { sha256: "ab".repeat(32) },
        arguments_mode: i % 4 === 0 ? "full" : "hashed",
        classification: { effect: "read_only", blast_radius: "single", source: "mapping" },
        decision: "allow",
        rule: null,
        reason: "matched",
        mode: "enforce",
        policy_version: "2026-12-01.1",
        obligations: [],
        hold_id: null,
        would_block: null,
        unverified_read: false,
      },
    });
    out.push({
      kind: "outcome",
      id: `${chain}-o${i}`,
      at: at(5),
      body: {
        decision_id: id,
        status: i % 5 ? "succeeded" : "failed",
        result_hash: "cd".repeat(32),
        duration_ms: 7 + i,
        obligations_applied: [],
        output_problems: [],
        reason: null,
      },
    });
    if (i % 4 === 3)
      out.push({
        kind: "blocked",
        id: `${chain}-b${i}`,
        at: at(9),
        body: { principal: "agent:ci", team: chain, run: null, tool: "db.drop", check: "policy", reason: "refused", rule: "no-drop" },
      });
  }
  out.push({
    kind: "tools.listed",
    id: `${chain}-l`,
    at: new Date(t0 + calls * 1000).toISOString(),
    body: { principal: "agent:ci", team: chain, shown: ["alpha__fs.read"], hidden: [] },
  });
  return out;
}

/** A settled export: team-a and team-b checkpointed midway and at their heads, `_global` committing every checkpoint and signed at its head. */
async function buildExport(): Promise<ValidExport> {
  const pair = await generateSigningKey("fuzz-1");
  const key = signingKeyFrom(JSON.stringify(pair.privateJwk));
  const lines: string[] = [
    JSON.stringify({ export: { v: 1, gateway: GW, generated_at: "2026-12-02T00:00:00.000Z", chains: ["team-a", "team-b", "_global"] } }),
  ];
  const commits: EntryDraft[] = [];
  const all: LedgerEntry[] = [];
  for (const [chain, calls] of [
    ["team-a", 6],
    ["team-b", 4],
  ] as const) {
    const es = chainEntries(chain, EMPTY_HEAD, drafts(chain, calls));
    all.push(...es);
    const cps: Checkpoint[] = [];
    for (const size of [Math.floor(es.length / 2), es.length]) {
      const e = es[size - 1]!;
      const note = await signCheckpoint(checkpointOrigin(GW, chain), size, e.hash, key);
      cps.push({ chain, size, hash: e.hash, at: e.at, note });
      commits.push({ kind: "checkpoint", id: `checkpoint:${chain}:${size}`, at: e.at, body: { chain, size, hash: e.hash, note } });
    }
    lines.push(...es.map((e) => JSON.stringify({ entry: e })), ...cps.map((c) => JSON.stringify({ checkpoint: c })));
  }
  const global = chainEntries("_global", EMPTY_HEAD, [
    { kind: "config.changed", id: "config:1", at: "2026-12-01T11:00:00.000Z", body: { what: "config", from: null, to: "ef".repeat(32), by: "deploy" } },
    ...commits,
  ]);
  all.push(...global);
  const g = global.at(-1)!;
  const gcp: Checkpoint = {
    chain: "_global",
    size: g.seq,
    hash: g.hash,
    at: g.at,
    note: await signCheckpoint(checkpointOrigin(GW, "_global"), g.seq, g.hash, key),
  };
  lines.push(JSON.stringify({ checkpoint: gcp }), ...global.map((e) => JSON.stringify({ entry: e })));
  return { text: `${lines.join("\n")}\n`, lines, jwks: { keys: [pair.publicJwk] }, entries: all };
}

/** The bytes as the CLI reads them: a stream of chunks cut at the given sizes, split into lines by ndjsonLines. */
async function verifyBytes(bytes: Uint8Array, jwks: unknown, cuts: number[] = []): Promise<ExportReport> {
  async function* chunks() {
    let at = 0;
    for (const c of cuts) {
      if (at >= bytes.length) break;
      yield bytes.slice(at, at + Math.max(1, c));
      at += Math.max(1, c);
    }
    if (at < bytes.length) yield bytes.slice(at);
  }
  return verifyExport(ndjsonLines(chunks()), jwks as { keys: JsonWebKey[] });
}

/** A report is an answer: a boolean verdict, problems each with a reason, and the first of them as firstBad. */
function wellFormed(r: ExportReport): void {
  expect(typeof r.ok).toBe("boolean");
  expect(Array.isArray(r.problems)).toBe(true);
  expect(r.problems.length).toBeLessThanOrEqual(100);
  for (const p of r.problems) {
    expect(typeof p.reason).toBe("string");
    expect(p.reason.length).toBeGreaterThan(0);
  }
  expect(r.ok).toBe(r.problems.length === 0);
  if (!r.ok) expect(r.firstBad).toEqual(r.problems[0]);
}

/** Not valid, and saying why. */
function refused(r: ExportReport, what: string): void {
  wellFormed(r);
  expect(r.ok, `${what} verified as valid`).toBe(false);
  expect(r.firstBad?.reason).toBeTruthy();
}

/**
 * What an export holds that a hash or signature covers: the lines the verifier reads (split on
 * "\n", a trailing "\r" dropped, blank lines skipped), parsed; each chain's entries in order (as
 * RFC 8785 JSON) and the checkpoints (chain, size, hash, note; `at` is not signed). The header is
 * covered by nothing: only that it is still a header counts. Null when a line is not an export line.
 */
function signedContent(text: string): { perChain: Map<string, string[]>; cps: Set<string> } | null {
  const perChain = new Map<string, string[]>();
  const cps = new Set<string>();
  let header = false;
  for (const raw of text.split("\n")) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line.trim() === "") continue;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      return null;
    }
    if (typeof v !== "object" || v === null || Array.isArray(v) || Object.keys(v).length !== 1) return null;
    const o = v as { export?: unknown; entry?: JsonObject; checkpoint?: JsonObject };
    if (!header) {
      if (o.export === undefined) return null;
      header = true;
      continue;
    }
    if (o.entry !== undefined) {
      const chain = typeof o.entry?.chain === "string" ? o.entry.chain : "?";
      let c: string;
      try {
        c = canonicalJson(o.entry);
      } catch {
        return null;
      }
      perChain.set(chain, [...(perChain.get(chain) ?? []), c]);
    } else if (o.checkpoint !== undefined && typeof o.checkpoint === "object" && o.checkpoint !== null) {
      const { chain, size, hash, note } = o.checkpoint as Record<string, unknown>;
      cps.add(JSON.stringify([chain, size, hash, note]));
    } else return null;
  }
  return { perChain, cps };
}

/**
 * What the verifier may accept of an altered export: the same entries per chain, in the same
 * order, and only checkpoints the original signed — or, with `prefixes`, each chain a prefix of
 * the original's (an unanchored tail cut off is reported as such, not refused).
 */
function sameSignedContent(original: string, altered: string, prefixes = false): boolean {
  const a = signedContent(original)!;
  const b = signedContent(altered);
  if (!b) return false;
  if (!prefixes && a.perChain.size !== b.perChain.size) return false;
  for (const [chain, es] of b.perChain) {
    const orig = a.perChain.get(chain);
    if (!orig) return false;
    if (prefixes ? JSON.stringify(orig.slice(0, es.length)) !== JSON.stringify(es) : JSON.stringify(orig) !== JSON.stringify(es)) return false;
  }
  if (!prefixes) for (const chain of a.perChain.keys()) if (!b.perChain.has(chain)) return false;
  for (const c of b.cps) if (!a.cps.has(c)) return false;
  return true;
}

let fx: ValidExport;
beforeAll(async () => {
  fx = await buildExport();
});

const cutsArb = fc.array(fc.integer({ min: 1, max: 64 }), { maxLength: 12 });
const jwksArb = fc.oneof(
  { weight: 6, arbitrary: fc.constant("the gateway's") },
  { weight: 1, arbitrary: fc.constant({ keys: [] }) },
  { weight: 1, arbitrary: fc.anything({ maxDepth: 2 }) },
  {
    weight: 1,
    arbitrary: fc.record({
      keys: fc.array(fc.record({ kty: fc.constantFrom("OKP", "EC"), crv: fc.constantFrom("Ed25519", "X25519"), x: fc.base64String({ maxLength: 44 }) }), {
        maxLength: 2,
      }),
    }),
  },
);
const jwksOf = (j: unknown) => (j === "the gateway's" ? fx.jwks : j);

describe("the ledger verifier under fuzzing", () => {
  it("the unmodified export verifies, however its bytes are chunked (the oracle's baseline)", async () => {
    await fc.assert(
      fc.asyncProperty(cutsArb, async (cuts) => {
        const r = await verifyBytes(enc.encode(fx.text), fx.jwks, cuts);
        wellFormed(r);
        expect(r.problems).toEqual([]);
        expect(r.ok).toBe(true);
        expect(r.chains["team-a"]).toMatchObject({ entries: 14, anchored: 14, unanchored: 0 });
        expect(r.chains["team-b"]).toMatchObject({ entries: 10, anchored: 10, unanchored: 0 });
        expect(r.chains._global).toMatchObject({ entries: 5, anchored: 5, unanchored: 0 });
      }),
      { numRuns: 20 },
    );
    expect(sameSignedContent(fx.text, fx.text)).toBe(true);
  });

  it("arbitrary bytes never crash it and never verify", async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 600 }), cutsArb, jwksArb, async (bytes, cuts, jwks) => {
        const r = await verifyBytes(bytes, jwksOf(jwks), cuts);
        if (new TextDecoder().decode(bytes).trim() === "") {
          // Only blank lines: the empty export, invalid too.
          refused(r, "a blank file");
          return;
        }
        refused(r, `bytes ${Array.from(bytes.slice(0, 40)).join(",")}`);
      }),
      { numRuns: 400 },
    );
  });

  it("arbitrary text lines and arbitrary JSON lines never crash it and never verify", async () => {
    const line = fc.oneof(
      fc.string({ unit: "binary", maxLength: 80 }),
      fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(line, { minLength: 1, maxLength: 8 }), jwksArb, async (lines, jwks) => {
        const r = await verifyExport(lines, jwksOf(jwks) as { keys: JsonWebKey[] });
        refused(r, JSON.stringify(lines).slice(0, 200));
      }),
      { numRuns: 400 },
    );
  });

  it("behind a well-formed header, arbitrary export lines (entries and checkpoints of any shape) never verify", async () => {
    const chainName = fc.oneof(fc.constantFrom("team-a", "team-b", "_global"), fc.string({ maxLength: 6 }));
    const hex = fc.stringMatching(/^[0-9a-f]{64}$/);
    const entryish = fc.record(
      {
        v: fc.oneof(fc.constant(1), fc.anything({ maxDepth: 0 })),
        chain: fc.oneof(chainName, fc.anything({ maxDepth: 0 })),
        seq: fc.oneof(fc.integer({ min: -1, max: 4 }), fc.double(), fc.anything({ maxDepth: 0 })),
        prev: fc.oneof(hex, fc.constant("0".repeat(64)), fc.string({ maxLength: 4 })),
        hash: fc.oneof(hex, fc.string({ maxLength: 4 })),
        kind: fc.oneof(fc.constantFrom("decision", "outcome", "checkpoint", "config.changed"), fc.string({ maxLength: 6 })),
        id: fc.string({ maxLength: 6 }),
        at: fc.oneof(fc.constant("2026-12-01T00:00:00.000Z"), fc.string({ maxLength: 6 })),
        body: fc.oneof(fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 2 })), fc.jsonValue({ maxDepth: 1 })),
      },
      { requiredKeys: [] },
    );
    const checkpointish = fc.record(
      {
        chain: chainName,
        size: fc.oneof(fc.integer({ min: -1, max: 30 }), fc.anything({ maxDepth: 0 })),
        hash: fc.oneof(hex, fc.string({ maxLength: 4 })),
        at: fc.string({ maxLength: 4 }),
        // A note: random text, a real note of this export, or a real note with one character changed.
        note: fc.oneof(
          fc.string({ maxLength: 120 }),
          fc.constantFrom(...fx_notes()),
          fc
            .tuple(fc.constantFrom(...fx_notes()), fc.nat(), fc.string({ minLength: 1, maxLength: 1 }))
            .map(([n, i, c]) => n.slice(0, i % n.length) + c + n.slice((i % n.length) + 1)),
        ),
      },
      { requiredKeys: [] },
    );
    const lineArb = fc.oneof(
      entryish.map((e) => JSON.stringify({ entry: e })),
      checkpointish.map((c) => JSON.stringify({ checkpoint: c })),
      fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.stringify(v)),
      fc.constantFrom(...fx.lines.slice(1)).map((l) => l),
    );
    const headerArb = fc
      .record({ chains: fc.array(chainName, { maxLength: 3 }), teams: fc.option(fc.array(chainName, { maxLength: 2 }), { nil: undefined }) })
      .map(({ chains, teams }) =>
        JSON.stringify({ export: { v: 1, gateway: GW, generated_at: "2026-12-02T00:00:00.000Z", chains, ...(teams ? { teams } : {}) } }),
      );
    let ok = 0;
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(headerArb, fc.array(lineArb, { minLength: 1, maxLength: 8 }), async (header, lines) => {
        const r = await verifyExport([header, ...lines], fx.jwks);
        wellFormed(r);
        runs++;
        if (r.ok) ok++;
        const text = `${[header, ...lines].join("\n")}\n`;
        // Only the real export's own entries (each chain a prefix of its own) and its own signed checkpoints can be accepted.
        if (r.ok) {
          expect(sameSignedContent(fx.text, text, true), `accepted: ${text.slice(0, 400)}`).toBe(true);
          // What it accepted beyond its checkpoints is reported as unanchored, never as anchored.
          for (const [chain, c] of Object.entries(r.chains)) expect(c.anchored + c.unanchored, chain).toBe(c.head.seq);
        }
      }),
      { numRuns: 300 },
    );
    console.log(`verifier-fuzz: ${runs} arbitrary exports behind a header, ${ok} accepted (each a prefix of the real export's own chains)`);
  });

  it("a valid export altered by random byte and line mutations never verifies (unless it still parses to the same signed content)", async () => {
    type Mut =
      | { op: "set"; at: number; byte: number }
      | { op: "insert"; at: number; byte: number }
      | { op: "delete"; at: number; len: number }
      | { op: "copy"; from: number; to: number; len: number }
      | { op: "dropLine" | "dupLine"; line: number }
      | { op: "swapLines"; a: number; b: number };
    const mutArb: fc.Arbitrary<Mut> = fc.oneof(
      fc.record({ op: fc.constant("set" as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
      fc.record({ op: fc.constant("set" as const), at: fc.nat(), byte: fc.constantFrom(...enc.encode('0123456789abcdef":,{}[]\n \\')) }),
      fc.record({ op: fc.constant("insert" as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
      fc.record({ op: fc.constant("delete" as const), at: fc.nat(), len: fc.integer({ min: 1, max: 80 }) }),
      fc.record({ op: fc.constant("copy" as const), from: fc.nat(), to: fc.nat(), len: fc.integer({ min: 1, max: 64 }) }),
      fc.record({ op: fc.constantFrom("dropLine" as const, "dupLine" as const), line: fc.nat() }),
      fc.record({ op: fc.constant("swapLines" as const), a: fc.nat(), b: fc.nat() }),
    );
    const apply = (bytes: Uint8Array, m: Mut): Uint8Array => {
      const n = bytes.length;
      if (m.op === "set") {
        const out = bytes.slice();
        out[m.at % n] = m.byte;
        return out;
      }
      if (m.op === "insert") {
        const i = m.at % (n + 1);
        return Uint8Array.from([...bytes.slice(0, i), m.byte, ...bytes.slice(i)]);
      }
      if (m.op === "delete") {
        const i = m.at % n;
        return Uint8Array.from([...bytes.slice(0, i), ...bytes.slice(i + m.len)]);
      }
      if (m.op === "copy") {
        const src = bytes.slice(m.from % n, (m.from % n) + m.len);
        const out = bytes.slice();
        out.set(src.slice(0, Math.max(0, n - (m.to % n))), m.to % n);
        return out;
      }
      const lines = new TextDecoder().decode(bytes).split("\n");
      if (m.op === "dropLine") lines.splice(m.line % lines.length, 1);
      else if (m.op === "dupLine") lines.splice(m.line % lines.length, 0, lines[m.line % lines.length]!);
      else if (m.op === "swapLines") {
        const a = m.a % lines.length;
        const b = m.b % lines.length;
        [lines[a], lines[b]] = [lines[b]!, lines[a]!];
      }
      return enc.encode(lines.join("\n"));
    };
    let accepted = 0;
    let altered = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(mutArb, { minLength: 1, maxLength: 4 }), cutsArb, async (muts, cuts) => {
        const original = enc.encode(fx.text);
        const bytes = muts.reduce(apply, original);
        const r = await verifyBytes(bytes, fx.jwks, cuts);
        wellFormed(r);
        const text = new TextDecoder().decode(bytes);
        if (text === fx.text) {
          expect(r.ok).toBe(true);
          return;
        }
        altered++;
        if (r.ok) {
          accepted++;
          // Accepted: it must be the same signed content (e.g. whitespace inside JSON, a checkpoint line moved or dropped, the header's unsigned fields).
          expect(sameSignedContent(fx.text, text), `accepted after ${JSON.stringify(muts)}`).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
    // The mutations did alter the export, and almost all of them were caught.
    expect(altered).toBeGreaterThan(240);
    expect(accepted).toBeLessThan(altered / 4);
    console.log(`verifier-fuzz: ${altered} altered exports, ${altered - accepted} refused, ${accepted} accepted as the same signed content`);
  });

  it("a mutated signed checkpoint note, or arbitrary note text, never verifies and never throws", async () => {
    const note = fx_notes()[0]!;
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string({ maxLength: 200 }),
          fc.tuple(fc.nat(), fc.string({ minLength: 1, maxLength: 3 })).map(([i, s]) => note.slice(0, i % note.length) + s + note.slice((i % note.length) + 1)),
          fc.tuple(fc.nat(), fc.nat({ max: 8 })).map(([i, k]) => note.slice(0, i % note.length) + note.slice((i % note.length) + 1 + k)),
        ),
        jwksArb,
        async (text, jwks) => {
          const v = await verifyCheckpoint(text, jwksOf(jwks) as { keys: JsonWebKey[] });
          if (text === note && jwksOf(jwks) === fx.jwks) expect(v.ok).toBe(true);
          else if (v.ok) {
            // Only a text whose signed part and signature are unchanged verifies (e.g. a removed trailing character of the signature line cannot).
            expect(text).toBe(note);
          } else expect(v.reason.length).toBeGreaterThan(0);
        },
      ),
      { numRuns: 400 },
    );
  });

  it("a receipt never verifies against a report that is not ok; receipts of the valid export verify only for their own record", async () => {
    const good = await verifyExport(fx.lines, fx.jwks, { keep: () => true });
    expect(good.ok).toBe(true);
    const decisions = fx.entries.filter((e) => e.kind === "decision");
    const receiptArb = fc.oneof(
      fc.anything({ maxDepth: 2 }),
      fc.constantFrom(...decisions).map((e) => ({ chain: e.chain, seq: e.seq, hash: e.hash, decision_id: e.id })),
      fc.record({
        chain: fc.constantFrom("team-a", "team-b", "_global", "x"),
        seq: fc.integer({ min: -1, max: 30 }),
        hash: fc.constantFrom(...fx.entries.map((e) => e.hash)),
        decision_id: fc.constantFrom(...decisions.map((e) => e.id), "nope"),
      }),
    );
    const bad = await verifyExport([...fx.lines.slice(0, 3), ...fx.lines.slice(4)], fx.jwks, { keep: () => true });
    refused(bad, "an export missing a line");
    await fc.assert(
      fc.asyncProperty(receiptArb, (receipt) => {
        expect(verifyReceipt(receipt, bad).ok).toBe(false);
        const v = verifyReceipt(receipt, good);
        if (!v.ok) {
          expect(v.reason.length).toBeGreaterThan(0);
          return;
        }
        // Verified: the receipt is exactly one record of the decision it names.
        const r = receipt as { chain: string; seq: number; hash: string; decision_id: string };
        const e = fx.entries.find((x) => x.chain === r.chain && x.seq === r.seq)!;
        expect(e.hash).toBe(r.hash);
        expect(e.id === r.decision_id || e.body.decision_id === r.decision_id).toBe(true);
      }),
      { numRuns: 400 },
    );
  });
});

/** The signed notes of the valid export (its checkpoint lines). */
function fx_notes(): string[] {
  return fx.lines.flatMap((l) => {
    const c = (JSON.parse(l) as { checkpoint?: Checkpoint }).checkpoint;
    return c ? [c.note] : [];
  });
}
