/**
 * The offline verifier against a seeded 200-entry export (team-a 110 entries, team-b 90, and the
 * `_global` chain committing their signed checkpoints): every byte of a sample of records, every
 * field of every record, every deletion and every adjacent swap is detected and named by its
 * chain and seq; truncation is detected down to the last checkpoint and the unanchored tail is
 * reported after it; checkpoints and global commitments must match the chains; RFC 8785's
 * reference vectors canonicalise as the RFC says; receipts verify, and one for a removed or
 * altered record does not. Mutations are verified by forking the streaming verifier at the
 * altered line (a full pass costs ~25 ms here); a random sample is cross-checked by full runs.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { chainEntries, EMPTY_HEAD } from "../../src/ledger/chain.ts";
import { type Checkpoint, checkpointOrigin, type SigningKey, signCheckpoint, signingKeyFrom } from "../../src/ledger/checkpoint.ts";
import { canonicalHash, canonicalJson, sha256Hex } from "../../src/wire/canonical.ts";
import type { EntryDraft, EntryKind, LedgerEntry } from "../../src/ledger/records.ts";
import { ExportVerifier, verifyExport } from "../../src/ledger/export-verifier.ts";
import { ndjsonLines, type Problem } from "../../src/ledger/export-format.ts";
import { verifyReceipt } from "../../src/ledger/receipt.ts";
import type { Json, JsonObject } from "../../src/wire/jsonrpc.ts";

const GW = "https://gw.example.com";
const T0 = Date.UTC(2026, 11, 1);

/** mulberry32: a small seeded PRNG. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PRINCIPALS = ["alice@example.com", "bob", "zoë", "李雷", "ops+bot"];
const TOOLS = ["echo", "fs.read", "db:query", "deploy_prod"];

/** Seeded drafts for one team chain: decisions with outcomes, blocked calls, lists, holds, grants, switches and config changes. */
function drafts(chain: string, count: number, rand: () => number): EntryDraft[] {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const hex = () => Array.from({ length: 64 }, () => "0123456789abcdef"[Math.floor(rand() * 16)]).join("");
  const out: EntryDraft[] = [];
  let t = T0 + Math.floor(rand() * 1000);
  const push = (kind: EntryKind, body: JsonObject, id = `${chain}-${out.length + 1}-${Math.floor(rand() * 1e9).toString(36)}`) => {
    t += 1 + Math.floor(rand() * 5000);
    out.push({ kind, id, at: new Date(t).toISOString(), body });
    return id;
  };
  while (out.length < count) {
    const r = rand();
    const principal = pick(PRINCIPALS);
    const tool = pick(TOOLS);
    if (r < 0.5) {
      const full = rand() < 0.4;
      const args: Json = full
        ? {
            path: `/srv/données/${Math.floor(rand() * 100)}`,
            n: Math.floor(rand() * 1000) - 500,
            ratio: 0.25,
            big: 1e21,
            tiny: 1e-7,
            flag: rand() < 0.5,
            none: null,
            list: [1, "two", { three: 3 }],
            note: "tab\there \u0001 😀",
          }
        : { sha256: hex() };
      const id = push("decision", {
        principal,
        team: chain,
        run: rand() < 0.5 ? null : `run-${Math.floor(rand() * 50)}`,
        upstream: pick(["alpha", "beta"]),
        tool,
        arguments: args,
        arguments_mode: full ? "full" : "hashed",
        classification: { effect: pick(["read_only", "idempotent", "irreversible"]), blast_radius: pick(["single", "scoped"]), source: "annotations" },
        decision: pick(["allow", "hold"]),
        rule: rand() < 0.5 ? null : `rule-${Math.floor(rand() * 9)}`,
        reason: "matched",
        mode: "enforce",
        policy_version: "2026-11-30.1",
        obligations: rand() < 0.3 ? ["redact_output"] : [],
        hold_id: null,
      });
      if (out.length < count && rand() < 0.85) {
        const status = pick(["succeeded", "succeeded", "failed", "uncertain"] as const);
        push("outcome", {
          decision_id: id,
          status,
          result_hash: status === "uncertain" ? null : hex(),
          duration_ms: Math.floor(rand() * 3000),
          obligations_applied: [],
          reason: status === "failed" ? "upstream error -32603" : null,
        });
      }
    } else if (r < 0.62)
      push("blocked", { principal, team: chain, run: null, tool, check: pick(["grant", "policy", "kill_switch", "schema"]), reason: "refused" });
    else if (r < 0.72) push("tools.listed", { principal, team: chain, shown: TOOLS.slice(0, 2 + Math.floor(rand() * 3)), hidden: ["admin__drop"] });
    else if (r < 0.8)
      push(pick(["hold.created", "hold.approved", "hold.consumed"] as const), {
        hold_id: `h-${Math.floor(rand() * 99)}`,
        decision_id: null,
        principal,
        team: chain,
        tool,
        approver: rand() < 0.5 ? "carol" : null,
        reason: null,
      });
    else if (r < 0.88)
      push("grant.minted", {
        jti: hex().slice(0, 22),
        sub: principal,
        team: chain,
        roles: ["agent"],
        tools: [tool],
        exp: 1_800_000_000 + Math.floor(rand() * 1e6),
        by: "admin",
      });
    else if (r < 0.94)
      push("killswitch.changed", {
        action: pick(["halt", "resume"]),
        scope: "tool",
        target: tool,
        reason: "incident 42",
        by: "oncall",
        version: Math.floor(rand() * 20),
      });
    else push("config.changed", { what: "policy", from: "2026-11-29.3", to: "2026-11-30.1", by: "admin" });
  }
  return out;
}

interface Fixture {
  lines: string[];
  jwks: { keys: JsonWebKey[] };
  key: SigningKey;
  entries: Record<string, LedgerEntry[]>;
  /** Index in `lines` of each entry, by chain and seq. */
  at: Record<string, number[]>;
  /** prefix[i]: the verifier after lines[0..i). */
  prefix: ExportVerifier[];
}

interface Shape {
  /** Sizes at which team chains are checkpointed. */
  checkpoints: Record<string, number[]>;
}

/** The default shape: checkpoints every 32 entries and at each head (a settled gateway: nothing unanchored). */
const SETTLED: Shape = { checkpoints: { "team-a": [32, 64, 96, 110], "team-b": [32, 64, 90] } };
/** team-a has 14 entries after its last checkpoint. */
const WITH_TAIL: Shape = { checkpoints: { "team-a": [32, 64, 96], "team-b": [32, 64, 90] } };

const cpLine = (c: Checkpoint) => JSON.stringify({ checkpoint: c });
const entryLine = (e: LedgerEntry) => JSON.stringify({ entry: e });

async function build(shape: Shape, keyPair?: { privateJwk: JsonWebKey; publicJwk: JsonWebKey }): Promise<Fixture> {
  const pair = keyPair ?? (await generateSigningKey("ledger-1"));
  const key = signingKeyFrom(JSON.stringify(pair.privateJwk));
  const rand = prng(8785);
  const entries: Record<string, LedgerEntry[]> = {};
  const blocks: Record<string, string[]> = {};
  const commits: { t: number; draft: EntryDraft }[] = [];
  for (const [chain, count] of [
    ["team-a", 110],
    ["team-b", 90],
  ] as const) {
    const es = chainEntries(chain, EMPTY_HEAD, drafts(chain, count, rand));
    entries[chain] = es;
    const cps: Checkpoint[] = [];
    for (const size of shape.checkpoints[chain]!) {
      const e = es[size - 1]!;
      const at = new Date(Date.parse(e.at) + 1000).toISOString();
      const note = await signCheckpoint(checkpointOrigin(GW, chain), size, e.hash, key);
      cps.push({ chain, size, hash: e.hash, at, note });
      commits.push({ t: Date.parse(at), draft: { kind: "checkpoint", id: `checkpoint:${chain}:${size}`, at, body: { chain, size, hash: e.hash, note } } });
    }
    // team-a: each checkpoint right after the entry it covers; team-b: all of them after its entries.
    blocks[chain] =
      chain === "team-a" ? es.flatMap((e) => [entryLine(e), ...cps.filter((c) => c.size === e.seq).map(cpLine)]) : [...es.map(entryLine), ...cps.map(cpLine)];
  }
  const global = chainEntries(
    "_global",
    EMPTY_HEAD,
    commits.sort((a, b) => a.t - b.t).map((c) => c.draft),
  );
  entries._global = global;
  const g = global.at(-1)!;
  const gcp: Checkpoint = {
    chain: "_global",
    size: g.seq,
    hash: g.hash,
    at: g.at,
    note: await signCheckpoint(checkpointOrigin(GW, "_global"), g.seq, g.hash, key),
  };
  // _global: its checkpoint first, before the entries it covers.
  blocks._global = [cpLine(gcp), ...global.map(entryLine)];
  const lines = [
    JSON.stringify({ export: { v: 1, gateway: GW, generated_at: "2026-12-02T00:00:00.000Z", chains: ["team-a", "team-b", "_global"] } }),
    ...blocks["team-a"]!,
    ...blocks["team-b"]!,
    ...blocks._global,
  ];
  const at: Record<string, number[]> = {};
  lines.forEach((l, i) => {
    const e = (JSON.parse(l) as { entry?: LedgerEntry }).entry;
    if (!e) return;
    at[e.chain] ??= [];
    at[e.chain]![e.seq] = i;
  });
  const jwks = { keys: [pair.publicJwk] };
  const prefix: ExportVerifier[] = [new ExportVerifier(jwks)];
  for (const l of lines) {
    const v = prefix.at(-1)!.fork();
    await v.push(l);
    prefix.push(v);
  }
  return { lines, jwks, key, entries, at, prefix };
}

/**
 * The first problem of the export with lines[index, index + remove) replaced by `insert`: the
 * verifier forked just before, fed the replacement and then the rest until its first problem is
 * final (or the end).
 */
async function firstBadOf(fx: Fixture, index: number, insert: string[], remove = 1): Promise<Problem | undefined> {
  const v = fx.prefix[index]!.fork();
  for (const l of insert) await v.push(l);
  for (let i = index + remove; i < fx.lines.length && (v.firstBad === undefined || v.attributing); i++) await v.push(fx.lines[i]!);
  return v.firstBad && !v.attributing ? v.firstBad : v.finish().firstBad;
}

const altered = (fx: Fixture, index: number, insert: string[], remove = 1) => [...fx.lines.slice(0, index), ...insert, ...fx.lines.slice(index + remove)];

/** Flips one bit of byte `i` of a line's UTF-8 encoding. */
function flipByte(line: string, i: number): string {
  const bytes = new TextEncoder().encode(line);
  bytes[i]! ^= 0x01;
  return new TextDecoder().decode(bytes);
}

type Mutation = { what: string; value: unknown };

/** Every single-field change of an entry: each leaf changed, each object and array grown, each key removed. */
function fieldMutations(e: LedgerEntry): Mutation[] {
  const out: Mutation[] = [];
  const walk = (v: unknown, path: (string | number)[], set: (x: unknown) => unknown) => {
    const where = path.join(".");
    if (Array.isArray(v)) {
      out.push({ what: `${where} += element`, value: set([...v, "x"]) });
      for (const [i, x] of v.entries()) walk(x, [...path, i], (y) => set(v.map((z, j) => (j === i ? y : z))));
    } else if (v !== null && typeof v === "object") {
      const o = v as Record<string, unknown>;
      out.push({ what: `${where} += key`, value: set({ ...o, added: 1 }) });
      for (const k of Object.keys(o)) {
        const { [k]: _drop, ...rest } = o;
        out.push({ what: `${where} -= ${k}`, value: set(rest) });
        walk(o[k], [...path, k], (y) => set({ ...o, [k]: y }));
      }
    } else if (typeof v === "string") {
      out.push({ what: `${where} (string)`, value: set(v === "" ? "x" : v.slice(0, -1) + String.fromCharCode(v.charCodeAt(v.length - 1) ^ 1)) });
    } else if (typeof v === "number") out.push({ what: `${where} (number)`, value: set(v + 1 === v ? v * 2 : v + 1) });
    else if (typeof v === "boolean") out.push({ what: `${where} (boolean)`, value: set(!v) });
    else out.push({ what: `${where} (null)`, value: set(0) });
  };
  walk(e, [], (x) => x);
  return out;
}

let fx: Fixture;
beforeAll(async () => {
  fx = await build(SETTLED);
});

describe("a seeded 200-entry export", () => {
  it("verifies: every chain complete and anchored at its head", async () => {
    const r = await verifyExport(fx.lines, fx.jwks);
    expect(r.problems).toEqual([]);
    expect(r.ok).toBe(true);
    expect(Object.values(fx.entries).reduce((n, es) => n + es.length, 0)).toBe(207);
    expect(r.chains["team-a"]).toEqual({
      entries: 110,
      head: { seq: 110, hash: fx.entries["team-a"]!.at(-1)!.hash },
      anchored: 110,
      unanchored: 0,
      checkpoints: 8,
    });
    expect(r.chains["team-b"]).toMatchObject({ entries: 90, anchored: 90, unanchored: 0, checkpoints: 6 });
    expect(r.chains._global).toMatchObject({ entries: 7, anchored: 7, unanchored: 0, checkpoints: 1 });
    expect(r.lines).toBe(fx.lines.length);
    expect(r.warnings).toEqual([]);
    // Every kind of record is in the fixture.
    expect(
      new Set(
        Object.values(fx.entries)
          .flat()
          .map((e) => e.kind),
      ).size,
    ).toBeGreaterThanOrEqual(10);
    // The forked prefix verifier agrees with a full run.
    expect(fx.prefix.at(-1)!.fork().finish()).toEqual(r);
  });

  it("(a) every byte of every record, flipped, is detected and names the record's chain and seq", { timeout: 120_000 }, async () => {
    // FLIP_RECORDS of the 207 records (all of them: ~110k flips, ~11 s in workerd); the edges of every chain always included.
    const FLIP_RECORDS = 207;
    const rand = prng(20);
    const all = Object.values(fx.entries).flat();
    const first = (c: string) => fx.entries[c]![0]!;
    const last = (c: string) => fx.entries[c]!.at(-1)!;
    const sample = new Set([first("team-a"), last("team-a"), first("team-b"), last("team-b"), first("_global"), last("_global")]);
    sample.add(all.find((e) => e.kind === "decision" && e.body.arguments_mode === "full")!);
    while (sample.size < Math.min(FLIP_RECORDS, all.length)) sample.add(all[Math.floor(rand() * all.length)]!);
    let flips = 0;
    const missed: string[] = [];
    for (const e of sample) {
      const i = fx.at[e.chain]![e.seq]!;
      const bytes = new TextEncoder().encode(fx.lines[i]!).length;
      for (let b = 0; b < bytes; b++) {
        flips++;
        const bad = await firstBadOf(fx, i, [flipByte(fx.lines[i]!, b)]);
        if (bad?.chain !== e.chain || bad.seq !== e.seq || bad.line !== i + 1) missed.push(`${e.chain}#${e.seq} byte ${b}: ${JSON.stringify(bad)}`);
      }
    }
    expect(missed).toEqual([]);
    expect(flips).toBeGreaterThan(sample.size * 300);
    console.log(`ledger-verify: ${flips} single-byte flips over ${sample.size} records, all detected at the right chain and seq`);
  });

  it("(a) every field of every record, changed, is detected and names the record's chain and seq", async () => {
    let changes = 0;
    const missed: string[] = [];
    for (const es of Object.values(fx.entries)) {
      for (const e of es) {
        const i = fx.at[e.chain]![e.seq]!;
        for (const m of fieldMutations(e)) {
          changes++;
          const bad = await firstBadOf(fx, i, [JSON.stringify({ entry: m.value })]);
          if (bad?.chain !== e.chain || bad.seq !== e.seq) missed.push(`${e.chain}#${e.seq} ${m.what}: ${JSON.stringify(bad)}`);
        }
      }
    }
    expect(missed).toEqual([]);
    expect(changes).toBeGreaterThan(207 * 15);
    console.log(`ledger-verify: ${changes} single-field changes over 207 records, all detected at the right chain and seq`);
  });

  it("(b) every deletion of one entry and every adjacent swap is detected at the first seq out of place", async () => {
    const missed: string[] = [];
    let cases = 0;
    for (const [chain, es] of Object.entries(fx.entries)) {
      for (const e of es) {
        cases++;
        const bad = await firstBadOf(fx, fx.at[chain]![e.seq]!, []);
        if (bad?.chain !== chain || bad.seq !== e.seq) missed.push(`delete ${chain}#${e.seq}: ${JSON.stringify(bad)}`);
        const next = es[e.seq];
        if (!next) continue;
        cases++;
        const i = fx.at[chain]![e.seq]!;
        const j = fx.at[chain]![next.seq]!;
        const between = fx.lines.slice(i + 1, j);
        const swapped = await firstBadOf(fx, i, [fx.lines[j]!, ...between, fx.lines[i]!], j - i + 1);
        if (swapped?.chain !== chain || swapped.seq !== e.seq) missed.push(`swap ${chain}#${e.seq}/${next.seq}: ${JSON.stringify(swapped)}`);
      }
    }
    expect(missed).toEqual([]);
    expect(cases).toBe(207 * 2 - 3);
    console.log(`ledger-verify: 207 deletions and 204 adjacent swaps, all detected at the first seq out of place`);
  });

  it("forked verification agrees with full runs (a random sample of the alterations above)", async () => {
    const rand = prng(99);
    for (let k = 0; k < 24; k++) {
      const chain = ["team-a", "team-b", "_global"][k % 3]!;
      const e = fx.entries[chain]![Math.floor(rand() * fx.entries[chain]!.length)]!;
      const i = fx.at[chain]![e.seq]!;
      const insert = k % 2 ? [] : [flipByte(fx.lines[i]!, Math.floor(rand() * fx.lines[i]!.length))];
      const full = await verifyExport(altered(fx, i, insert), fx.jwks);
      expect(full.ok).toBe(false);
      expect(full.firstBad).toEqual(await firstBadOf(fx, i, insert));
    }
  });

  it("the order of checkpoint lines does not matter", async () => {
    for (const seed of [1, 2, 3]) {
      const rand = prng(seed);
      const entriesOnly = fx.lines.filter((l) => !l.startsWith('{"checkpoint"'));
      const out = [...entriesOnly];
      for (const cp of fx.lines.filter((l) => l.startsWith('{"checkpoint"'))) out.splice(1 + Math.floor(rand() * (out.length - 1)), 0, cp);
      const r = await verifyExport(out, fx.jwks);
      expect(r.ok).toBe(true);
      expect(r.chains["team-a"]!.anchored).toBe(110);
      expect(r.chains._global!.anchored).toBe(7);
    }
  });

  it("a checkpoint that does not verify, or does not match its chain, makes the export invalid", async () => {
    const cpIndex = fx.lines.findIndex((l) => l.includes('"checkpoint":{"chain":"team-b","size":64'));
    const cp = (JSON.parse(fx.lines[cpIndex]!) as { checkpoint: Checkpoint }).checkpoint;
    const replaceWith = async (c: unknown) => (await verifyExport(altered(fx, cpIndex, [JSON.stringify({ checkpoint: c })]), fx.jwks)).firstBad;
    // Another key.
    const other = signingKeyFrom(JSON.stringify((await generateSigningKey("intruder")).privateJwk));
    expect(await replaceWith({ ...cp, note: await signCheckpoint(checkpointOrigin(GW, "team-b"), 64, cp.hash, other) })).toMatchObject({
      chain: "team-b",
      seq: 64,
      reason: expect.stringMatching(/does not verify/),
    });
    // The line's fields disagree with the signed note.
    expect(await replaceWith({ ...cp, size: 63, hash: fx.entries["team-b"]![62]!.hash })).toMatchObject({
      chain: "team-b",
      reason: expect.stringMatching(/its signed note says 64/),
    });
    // A good note for the wrong entry (signed, but the chain does not have that hash at 64).
    expect(
      await replaceWith({
        ...cp,
        hash: fx.entries["team-b"]![62]!.hash,
        note: await signCheckpoint(checkpointOrigin(GW, "team-b"), 64, fx.entries["team-b"]![62]!.hash, fx.key),
      }),
    ).toMatchObject({
      chain: "team-b",
      seq: 64,
      reason: expect.stringMatching(/differ from what was signed/),
    });
    // team-a's checkpoint presented as team-b's.
    const aNote = await signCheckpoint(checkpointOrigin(GW, "team-a"), 64, fx.entries["team-a"]![63]!.hash, fx.key);
    expect(await replaceWith({ chain: "team-b", size: 64, hash: fx.entries["team-a"]![63]!.hash, at: cp.at, note: aNote })).toMatchObject({
      chain: "team-b",
      reason: expect.stringMatching(/signed for origin gw\.example\.com\/ledger\/team-a/),
    });
    // The unsigned `at` is informational: changing it alone is not a change to the ledger.
    expect((await verifyExport(altered(fx, cpIndex, [JSON.stringify({ checkpoint: { ...cp, at: "2020-01-01T00:00:00.000Z" } })]), fx.jwks)).ok).toBe(true);
  });

  it("global commitments must be consistent with the team chains they name", async () => {
    // A correctly chained and signed _global whose last commitment names a hash team-a does not have at that size.
    const bogus = fx.entries["team-b"]![5]!.hash;
    const note = await signCheckpoint(checkpointOrigin(GW, "team-a"), 50, bogus, fx.key);
    const g = fx.entries._global!;
    const [extra] = chainEntries("_global", { seq: g.length, hash: g.at(-1)!.hash }, [
      { kind: "checkpoint", id: "checkpoint:team-a:50", at: "2026-12-01T09:00:00.000Z", body: { chain: "team-a", size: 50, hash: bogus, note } },
    ]);
    const r = await verifyExport([...fx.lines, entryLine(extra!)], fx.jwks);
    expect(r.firstBad).toMatchObject({
      chain: "team-a",
      seq: 50,
      line: fx.lines.length + 1,
      reason: expect.stringMatching(/_global commitment at seq 8 signs entry 50/),
    });
    // A commitment of size beyond team-a's export: team-a was truncated below a globally committed checkpoint.
    const note2 = await signCheckpoint(checkpointOrigin(GW, "team-a"), 120, bogus, fx.key);
    const [ahead] = chainEntries("_global", { seq: g.length, hash: g.at(-1)!.hash }, [
      { kind: "checkpoint", id: "x", at: "2026-12-01T09:00:00.000Z", body: { chain: "team-a", size: 120, hash: bogus, note: note2 } },
    ]);
    expect((await verifyExport([...fx.lines, entryLine(ahead!)], fx.jwks)).firstBad).toMatchObject({
      chain: "team-a",
      seq: 111,
      reason: expect.stringMatching(/truncated/),
    });
    // A global entry that is not a commitment.
    const [odd] = chainEntries("_global", { seq: g.length, hash: g.at(-1)!.hash }, [{ kind: "decision", id: "y", at: "2026-12-01T09:00:00.000Z", body: {} }]);
    expect((await verifyExport([...fx.lines, entryLine(odd!)], fx.jwks)).firstBad).toMatchObject({
      chain: "_global",
      seq: 8,
      reason: expect.stringMatching(/must be a checkpoint commitment/),
    });
  });

  it("a team-limited export (its header names the teams) verifies with a warning; an unfiltered one missing a team is invalid", async () => {
    const dropB = fx.lines.filter((l) => !l.includes('"chain":"team-b"') || l.startsWith('{"entry":{"v":1,"chain":"_global"'));
    const limited = dropB.map((l, i) => (i === 0 ? l.replace('"team-a","team-b"', '"team-a"').replace(/\}\}$/, ',"teams":["team-a"]}}') : l));
    const r = await verifyExport(limited, fx.jwks);
    expect(r.ok, JSON.stringify([limited[0], r.firstBad])).toBe(true);
    expect(Object.keys(r.chains)).toEqual(["team-a", "_global"]);
    expect(r.warnings.join()).toMatch(/do(es)? not hold.*team-b/);
    const dropped = dropB.map((l, i) => (i === 0 ? l.replace('"team-a","team-b"', '"team-a"') : l));
    const d = await verifyExport(dropped, fx.jwks);
    expect(d.ok).toBe(false);
    expect(d.problems.map((p) => p.reason).join()).toMatch(/commits checkpoints of team-b, which this unfiltered export does not hold/);
  });

  it("a header naming another gateway than the signatures, or no _global chain, is invalid (full runs and forked ones alike)", async () => {
    const swapped = [fx.lines[0]!.replace(JSON.stringify(GW), JSON.stringify("https://evil.example")), ...fx.lines.slice(1)];
    const r = await verifyExport(swapped, fx.jwks);
    expect(r.ok).toBe(false);
    expect(r.firstBad?.reason).toMatch(/header names gateway https:\/\/evil\.example, the signature another/);
    const v = new ExportVerifier(fx.jwks);
    await v.push(swapped[0]!);
    const f = v.fork();
    for (const l of swapped.slice(1)) await f.push(l);
    expect(f.finish().ok).toBe(false);
    expect((await verifyExport(fx.lines, fx.jwks, { gateway: "https://other.example" })).firstBad?.reason).toMatch(
      /names gateway https:\/\/gw\.example\.com, not https:\/\/other\.example/,
    );
    expect((await verifyExport(fx.lines, fx.jwks, { gateway: `${GW}/` })).ok).toBe(true);
    const noGlobal = [fx.lines[0]!.replace(',"_global"', ""), ...fx.lines.slice(1).filter((l) => !l.includes('"chain":"_global"'))];
    expect((await verifyExport(noGlobal, fx.jwks)).problems.map((p) => p.reason).join()).toMatch(/lists no _global chain/);
  });

  it("unreadable lines, a missing header and an empty export are invalid, with the line number", async () => {
    expect((await verifyExport([], fx.jwks)).firstBad).toMatchObject({ reason: "the export is empty" });
    expect((await verifyExport(fx.lines.slice(1), fx.jwks)).firstBad).toMatchObject({ line: 1, reason: expect.stringMatching(/not the export header/) });
    expect((await verifyExport([fx.lines[0]!, "{", ...fx.lines.slice(1)], fx.jwks)).firstBad).toMatchObject({
      chain: "team-a",
      seq: 1,
      line: 2,
      reason: "line 2 is not JSON",
    });
    expect((await verifyExport(altered(fx, 5, ['{"nonsense":1}'], 0), fx.jwks)).firstBad).toMatchObject({
      line: 6,
      reason: expect.stringMatching(/not an export line/),
    });
    // CRLF line ends and blank lines are fine.
    expect(
      (
        await verifyExport(
          fx.lines.flatMap((l) => [`${l}\r`, ""]),
          fx.jwks,
        )
      ).ok,
    ).toBe(true);
  });

  it("reports progress and reads a stream split anywhere (even inside a UTF-8 character)", async () => {
    const seen: number[] = [];
    await verifyExport(fx.lines, fx.jwks, { progressEvery: 50, onProgress: (n) => seen.push(n) });
    expect(seen).toEqual([50, 100, 150, 200]);
    const bytes = new TextEncoder().encode(`${fx.lines.join("\n")}\n`);
    async function* chunks() {
      for (let i = 0; i < bytes.length; i += 37) yield bytes.slice(i, i + 37);
    }
    const lines: string[] = [];
    for await (const l of ndjsonLines(chunks())) lines.push(l);
    expect(lines).toEqual(fx.lines);
  });
});

describe("(c) truncation", () => {
  let tail: Fixture;
  beforeAll(async () => {
    tail = await build(WITH_TAIL);
  });

  it("is detected down to the last checkpoint; after it, the unanchored tail is reported", async () => {
    const a = tail.at["team-a"]!;
    for (let k = 0; k <= 110; k++) {
      // team-a's entries after seq k removed; everything else (its checkpoint lines, team-b, _global) kept.
      const v = tail.prefix[k === 110 ? tail.lines.length : a[k + 1]!]!.fork();
      if (k < 110)
        for (let i = a[k + 1]!; i < tail.lines.length; i++) if (!tail.lines[i]!.startsWith('{"entry":{"v":1,"chain":"team-a"')) await v.push(tail.lines[i]!);
      const r = v.finish();
      if (k < 96) {
        expect(r.ok).toBe(false);
        expect(r.firstBad).toMatchObject({
          chain: "team-a",
          seq: k + 1,
          reason: expect.stringMatching(/^truncated: .* covers 96 entries of team-a, the export holds/),
        });
      } else {
        expect(r.chains["team-a"]).toMatchObject({ entries: k, anchored: 96, unanchored: k - 96 });
        if (k === 96) expect(r.ok).toBe(true);
        else {
          // Entries after the last signed checkpoint: INVALID by default, naming the range.
          expect(r.ok).toBe(false);
          expect(r.firstBad).toMatchObject({
            chain: "team-a",
            seq: 97,
            reason: expect.stringMatching(new RegExp(`^unanchored: entries 97\\.\\.${k} of team-a \\(${k - 96}\\)`)),
          });
        }
      }
    }
    // Accepted only when asked, and counted.
    const lines = tail.lines.filter(
      (l) => !/^\{"entry":\{"v":1,"chain":"team-a","seq":10[5-9],/.test(l) && !l.startsWith('{"entry":{"v":1,"chain":"team-a","seq":110,'),
    );
    const accepted = await verifyExport(lines, tail.jwks, { allowUnanchoredTail: true });
    expect(accepted).toMatchObject({ ok: true, unanchoredAccepted: 8, chains: { "team-a": { entries: 104, anchored: 96, unanchored: 8 } } });
    expect(accepted.warnings.join()).toMatch(/accepted an unanchored tail of team-a: seq 97\.\.104 \(8 entries\)/);
  });

  it("in the recommended order (_global first, checkpoints before entries) every cut of the file is detected", async () => {
    const header = fx.lines[0]!;
    const isCp = (l: string) => l.startsWith('{"checkpoint"');
    const block = (c: string) => fx.lines.filter((l) => l.includes(`"chain":"${c}"`) && (isCp(l) || l.startsWith(`{"entry":{"v":1,"chain":"${c}"`)));
    const ordered = [header, ...["_global", "team-a", "team-b"].flatMap((c) => [...block(c).filter(isCp), ...block(c).filter((l) => !isCp(l))])];
    expect(ordered.length).toBe(fx.lines.length);
    expect((await verifyExport(ordered, fx.jwks)).ok).toBe(true);
    const v = new ExportVerifier(fx.jwks);
    let detected = 0;
    for (let cut = 1; cut < ordered.length; cut++) {
      await v.push(ordered[cut - 1]!);
      const r = v.fork().finish();
      if (!r.ok && r.firstBad?.reason.startsWith("truncated")) detected++;
    }
    expect(detected).toBe(ordered.length - 1 - 1); // every cut but the one after the header alone (nothing read to miss)
  });

  it("a chain rewritten (re-hashed) below a checkpoint is caught by it; above, it is only unanchored", async () => {
    const a = tail.entries["team-a"]!;
    for (const from of [10, 64, 96, 100]) {
      const rewritten = chainEntries(
        "team-a",
        { seq: from - 1, hash: a[from - 2]!.hash },
        a.slice(from - 1).map((e) => ({ ...e, body: { ...e.body, reason: "rewritten" } })),
      );
      const lines = tail.lines.map((l) => {
        const e = (JSON.parse(l) as { entry?: LedgerEntry }).entry;
        return e?.chain === "team-a" && e.seq >= from ? entryLine(rewritten[e.seq - from]!) : l;
      });
      const r = await verifyExport(lines, tail.jwks);
      if (from <= 96)
        expect(r.firstBad).toMatchObject({ chain: "team-a", seq: Math.ceil(from / 32) * 32, reason: expect.stringMatching(/differ from what was signed/) });
      else {
        // Above the last checkpoint nothing signed tells the rewrite apart: refused as unanchored, accepted only when asked.
        expect(r).toMatchObject({ ok: false, firstBad: { chain: "team-a", seq: 97, reason: expect.stringMatching(/^unanchored: entries 97\.\.110/) } });
        expect(await verifyExport(lines, tail.jwks, { allowUnanchoredTail: true })).toMatchObject({
          ok: true,
          chains: { "team-a": { anchored: 96, unanchored: 14 } },
        });
      }
    }
  });

  it("a checkpoint saved earlier catches a truncated export that dropped it", async () => {
    const a = tail.entries["team-a"]!;
    // The export cut after team-a seq 80, its later checkpoints and the _global chain gone: on its own it looks fine.
    const cut = tail.lines.slice(0, tail.at["team-a"]![81]!).filter((l) => !l.includes('"size":96'));
    expect((await verifyExport(cut, tail.jwks, { allowUnanchoredTail: true })).ok).toBe(true);
    const saved = await signCheckpoint(checkpointOrigin(GW, "team-a"), 96, a[95]!.hash, tail.key);
    expect((await verifyExport(cut, tail.jwks, { checkpoints: [saved], allowUnanchoredTail: true })).firstBad).toMatchObject({
      chain: "team-a",
      seq: 81,
      line: null,
      reason: expect.stringMatching(/truncated: the checkpoint you gave \(#1\) covers 96/),
    });
    expect((await verifyExport(tail.lines, tail.jwks, { checkpoints: [saved], allowUnanchoredTail: true })).ok).toBe(true);
    const forged = await signCheckpoint(
      checkpointOrigin(GW, "team-a"),
      96,
      a[95]!.hash,
      signingKeyFrom(JSON.stringify((await generateSigningKey("x")).privateJwk)),
    );
    expect((await verifyExport(tail.lines, tail.jwks, { checkpoints: [forged] })).firstBad?.reason).toMatch(/you gave .* does not verify/);
  });
});

describe("(d) RFC 8785 reference vectors through canonicalJson", () => {
  it("§3.2.2: numbers, strings with escapes, literals; §3.2.4: its UTF-8 bytes", () => {
    const input = `{
      "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
      "string": "\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\"\\/",
      "literals": [null, true, false]
    }`;
    const expected = `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA'B\\"\\\\\\\\\\"/"}`;
    expect(canonicalJson(JSON.parse(input))).toBe(expected);
    const hex = `7b 22 6c 69 74 65 72 61 6c 73 22 3a 5b 6e 75 6c 6c 2c 74 72 75 65 2c 66 61 6c 73 65 5d 2c 22 6e 75 6d 62 65 72 73 22 3a
      5b 33 33 33 33 33 33 33 33 33 2e 33 33 33 33 33 33 33 2c 31 65 2b 33 30 2c 34 2e 35 2c 30 2e 30 30 32 2c 31 65 2d 32 37
      5d 2c 22 73 74 72 69 6e 67 22 3a 22 e2 82 ac 24 5c 75 30 30 30 66 5c 6e 41 27 42 5c 22 5c 5c 5c 5c 5c 22 2f 22 7d`;
    const bytes = Uint8Array.from(hex.trim().split(/\s+/), (h) => Number.parseInt(h, 16));
    expect(Array.from(new TextEncoder().encode(canonicalJson(JSON.parse(input))))).toEqual(Array.from(bytes));
    expect(canonicalHash(JSON.parse(input))).toBe(sha256Hex(new TextDecoder().decode(bytes)));
  });

  it("§3.2.3: properties sorted by UTF-16 code units, recursively; arrays keep their order", () => {
    const input = `{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One",
      "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control", "\\u00f6": "Latin Small Letter O With Diaeresis"}`;
    const expected =
      '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}';
    expect(canonicalJson(JSON.parse(input))).toBe(expected);
    expect(canonicalJson({ b: [3, { z: 1, a: 2 }], a: { d: 1, c: 2 } })).toBe('{"a":{"c":2,"d":1},"b":[3,{"a":2,"z":1}]}');
  });

  it("Appendix B: IEEE 754 values serialise as ECMAScript does; NaN and Infinity have no form", () => {
    const table: [string, string][] = [
      ["0000000000000000", "0"],
      ["8000000000000000", "0"],
      ["0000000000000001", "5e-324"],
      ["8000000000000001", "-5e-324"],
      ["7fefffffffffffff", "1.7976931348623157e+308"],
      ["ffefffffffffffff", "-1.7976931348623157e+308"],
      ["4340000000000000", "9007199254740992"],
      ["c340000000000000", "-9007199254740992"],
      ["4430000000000000", "295147905179352830000"],
      ["44b52d02c7e14af5", "9.999999999999997e+22"],
      ["44b52d02c7e14af6", "1e+23"],
      ["44b52d02c7e14af7", "1.0000000000000001e+23"],
      ["444b1ae4d6e2ef4e", "999999999999999700000"],
      ["444b1ae4d6e2ef4f", "999999999999999900000"],
      ["444b1ae4d6e2ef50", "1e+21"],
      ["3eb0c6f7a0b5ed8c", "9.999999999999997e-7"],
      ["3eb0c6f7a0b5ed8d", "0.000001"],
      ["41b3de4355555553", "333333333.3333332"],
      ["41b3de4355555554", "333333333.33333325"],
      ["41b3de4355555555", "333333333.3333333"],
      ["41b3de4355555556", "333333333.3333334"],
      ["41b3de4355555557", "333333333.33333343"],
      ["becbf647612f3696", "-0.0000033333333333333333"],
      ["43143ff3c1cb0959", "1424953923781206.2"],
    ];
    const fromBits = (h: string) => new DataView(Uint8Array.from(h.match(/../g)!, (x) => Number.parseInt(x, 16)).buffer).getFloat64(0);
    for (const [bits, text] of table) {
      expect(canonicalJson(fromBits(bits))).toBe(text);
      expect(canonicalJson({ n: [fromBits(bits)] })).toBe(`{"n":[${text}]}`);
    }
    for (const bits of ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"]) expect(() => canonicalJson(fromBits(bits))).toThrow();
    expect(() => canonicalJson({ s: "\ud800" })).toThrow();
  });
});

describe("(e) receipts", () => {
  it("a receipt verifies against the export; one of a removed or altered record does not", async () => {
    const a = fx.entries["team-a"]!;
    const outcome = a.find((e) => e.kind === "outcome")!;
    const decision = a.find((e) => e.id === outcome.body.decision_id)!;
    const receipt = { chain: "team-a", seq: outcome.seq, hash: outcome.hash, decision_id: decision.id };
    const keep = (e: LedgerEntry) => e.chain === "team-a";
    const report = await verifyExport(fx.lines, fx.jwks, { keep });
    expect(verifyReceipt(receipt, report)).toEqual({ ok: true, chain: "team-a", seq: outcome.seq, kind: "outcome", anchored: true });
    expect(verifyReceipt({ ...receipt, seq: decision.seq, hash: decision.hash }, report)).toMatchObject({ ok: true, kind: "decision" });
    // As the agent receives it: a tool result's _meta, or the JSON-RPC response around it.
    expect(verifyReceipt({ content: [], _meta: { "portcullis/receipt": receipt } }, report).ok).toBe(true);
    expect(verifyReceipt({ jsonrpc: "2.0", id: 1, result: { _meta: { "portcullis/receipt": receipt } } }, report).ok).toBe(true);
    // Not this decision's record; not a receipt; not this chain.
    expect(verifyReceipt({ ...receipt, decision_id: "someone-else" }, report)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/not a record of decision/),
    });
    expect(verifyReceipt({ chain: "team-a" }, report).ok).toBe(false);
    expect(verifyReceipt({ ...receipt, chain: "team-z" }, report)).toMatchObject({ ok: false, reason: expect.stringMatching(/does not hold chain team-z/) });
    // The record removed: the export no longer verifies, so it proves nothing.
    const removed = await verifyExport(altered(fx, fx.at["team-a"]![outcome.seq]!, []), fx.jwks, { keep });
    expect(verifyReceipt(receipt, removed)).toMatchObject({ ok: false, reason: expect.stringMatching(/does not verify/) });
    // Altered: a changed body, re-hashed.
    const changed = chainEntries("team-a", { seq: outcome.seq - 1, hash: outcome.prev }, [
      { ...outcome, body: { ...outcome.body, status: outcome.body.status === "failed" ? "succeeded" : "failed" } },
    ])[0]!;
    const alteredReport = await verifyExport(altered(fx, fx.at["team-a"]![outcome.seq]!, [entryLine(changed)]), fx.jwks, { keep });
    expect(alteredReport.ok).toBe(false);
    expect(verifyReceipt(receipt, alteredReport).ok).toBe(false);
    // A report checked without keeping the entry cannot prove it.
    expect(verifyReceipt(receipt, await verifyExport(fx.lines, fx.jwks))).toMatchObject({ ok: false, reason: expect.stringMatching(/not kept/) });
  });

  it("in the unanchored tail: never proven (nothing signed covers it); removed there and the chain re-hashed to hide it: does not verify either", async () => {
    const tail = await build(WITH_TAIL);
    const a = tail.entries["team-a"]!;
    const target = a[99]!; // seq 100, after the last checkpoint (96)
    const receipt = { chain: "team-a", seq: 100, hash: target.hash, decision_id: target.id };
    const keep = (e: LedgerEntry) => e.chain === "team-a";
    // By default the export itself is refused; with the tail accepted, the receipt is still not proven.
    expect(verifyReceipt(receipt, await verifyExport(tail.lines, tail.jwks, { keep }))).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/does not verify/),
    });
    expect(verifyReceipt(receipt, await verifyExport(tail.lines, tail.jwks, { keep, allowUnanchoredTail: true }))).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/not under a signed checkpoint/),
    });
    // Seq 100 removed and 101..110 re-chained as 100..109: the export verifies (it is all unanchored), the receipt does not.
    const rechained = chainEntries("team-a", { seq: 99, hash: a[98]!.hash }, a.slice(100));
    const lines = tail.lines.flatMap((l) => {
      const e = (JSON.parse(l) as { entry?: LedgerEntry }).entry;
      if (e?.chain !== "team-a" || e.seq < 100) return [l];
      return e.seq === 100 ? [] : [entryLine(rechained[e.seq - 101]!)];
    });
    const report = await verifyExport(lines, tail.jwks, { keep, allowUnanchoredTail: true });
    expect(report).toMatchObject({ ok: true, chains: { "team-a": { entries: 109, anchored: 96, unanchored: 13 } } });
    expect(verifyReceipt(receipt, report)).toMatchObject({ ok: false, reason: expect.stringMatching(/changed or replaced/) });
    // Removed at the very end of the tail: not in the export at all.
    const cutLast = tail.lines.filter((l) => !l.startsWith('{"entry":{"v":1,"chain":"team-a","seq":110,'));
    expect(
      verifyReceipt(
        { ...receipt, seq: 110, hash: a[109]!.hash, decision_id: a[109]!.id },
        await verifyExport(cutLast, tail.jwks, { keep, allowUnanchoredTail: true }),
      ),
    ).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/not in it/),
    });
  });
});
