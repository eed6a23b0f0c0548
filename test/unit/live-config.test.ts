/**
 * Hot reload in workerd: ConfigDO through real stubs (a fresh object per test) — versions 1, 2, …,
 * the newest is current, storing the current text again changes nothing and records nothing,
 * one `config.changed` record per version on the `_global` chain (from/to hashes, actor,
 * version; never the text), and a put whose ledger record cannot be written changes nothing; the
 * per-isolate cache on a controllable clock with a fake source (the var while nothing is stored,
 * a stored version served at most 1 s stale, a fresh read (a reload's comparison) past the cache, no read shared between callers (Workers cancels a promise's continuations when its request ends), the last good config
 * kept — and logged — when the object cannot be read, the var before any read succeeded); and
 * PUT /v1/config refusing a broken config whole (400, every problem, no secret value) for an
 * admin, and anyone else (403).
 */
import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ledgerObject } from "../../durable-objects/object-names.ts";
import { GLOBAL_CHAIN } from "../../src/ledger/records.ts";
import type { ConfigApi, StoredConfig, StoredConfigHead } from "../../durable-objects/contract.ts";
import type { LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { LiveConfigCache, type LiveConfigSource, supersededByDeploy } from "../../src/ports/live-config.ts";
import { sha256Hex } from "../../src/wire/canonical.ts";
import { allEntries } from "./fixtures.ts";

const SIGNING: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "http://127.0.0.1" };
let n = 0;
const freshObject = (): ConfigApi => env.CONFIG.get(env.CONFIG.idFromName(`test:${Date.now()}:${n++}`)) as unknown as ConfigApi;

/** Every entry of the `_global` chain. */
const globalEntries = () => allEntries(ledgerObject(env, GLOBAL_CHAIN)!);
const changesBy = async (by: string) => (await globalEntries()).filter((e) => e.kind === "config.changed" && e.body.by === by);

const TEXT_A = "upstreams:\n  - name: a\n    url: http://127.0.0.1:9/mcp\n";
const TEXT_B = "upstreams:\n  - name: b\n    url: http://127.0.0.1:9/mcp\n";

describe("ConfigDO", () => {
  it("stores versions 1, 2, … with one config.changed record each (before the commit); the current text again changes nothing", async () => {
    const o = freshObject();
    const by = `human:reload-${Date.now()}`;
    expect(await o.current()).toBeNull();
    expect(await o.head()).toBeNull();
    const a = sha256Hex(TEXT_A);
    const b = sha256Hex(TEXT_B);
    expect(await o.put(TEXT_A, a, by, SIGNING, { upstreams: ["a"] })).toEqual({ ok: true, changed: true, stored: { version: 1, sha256: a, base: null } });
    expect(await o.put(TEXT_A, a, by, SIGNING)).toEqual({ ok: true, changed: false, stored: { version: 1, sha256: a, base: null } });
    expect(await o.put(TEXT_B, b, by, SIGNING)).toEqual({ ok: true, changed: true, stored: { version: 2, sha256: b, base: null } });
    const cur = (await o.current()) as StoredConfig;
    expect(cur).toMatchObject({ v: 1, version: 2, text: TEXT_B, sha256: b, by });
    expect(typeof cur.at).toBe("number");
    expect(await o.head()).toEqual({ version: 2, sha256: b, base: null });
    const records = await changesBy(by);
    expect(records.map((e) => e.body)).toEqual([
      { upstreams: ["a"], what: "config", from: null, to: a, by, version: 1 },
      { what: "config", from: a, to: b, by, version: 2 },
    ]);
    expect(records.map((e) => e.id)).toEqual([`config:v1:${a}`, `config:v2:${b}`]);
    for (const e of records) {
      expect(e.chain).toBe(GLOBAL_CHAIN);
      expect(JSON.stringify(e)).not.toContain("127.0.0.1:9");
    }
  });

  it("refuses a put whose ledger record cannot be written, and a malformed one — and changes nothing", async () => {
    const o = freshObject();
    const by = `human:unrecorded-${Date.now()}`;
    // Another text than the first test's: record ids are (version, hash), one entry per stored version.
    const TEXT_A = "# second\nupstreams: []\n";
    const a = sha256Hex(TEXT_A);
    await o.put(TEXT_A, a, by, SIGNING);
    const broken = { secret: 7, gateway: null } as unknown as LedgerSigning;
    expect(await o.put(TEXT_B, sha256Hex(TEXT_B), by, broken)).toMatchObject({
      ok: false,
      message: expect.stringMatching(/did not change: its ledger record could not be written/),
    });
    expect(await o.put(TEXT_B, a, by, SIGNING)).toMatchObject({ ok: false, message: expect.stringMatching(/not the SHA-256/) });
    expect(await o.put("  ", sha256Hex("  "), by, SIGNING)).toMatchObject({ ok: false, message: expect.stringMatching(/empty/) });
    expect(await o.put(TEXT_B, sha256Hex(TEXT_B), "", SIGNING)).toMatchObject({ ok: false, message: expect.stringMatching(/actor/) });
    expect(await o.head()).toEqual({ version: 1, sha256: a, base: null });
    expect((await changesBy(by)).map((e) => e.body.version)).toEqual([1]);
  });
});

/** A source whose answers the test sets; counts reads. */
function fakeSource() {
  const state: { stored: StoredConfig | null; fail: boolean; heads: number; currents: number; gate: Promise<void> | null } = {
    stored: null,
    fail: false,
    heads: 0,
    currents: 0,
    gate: null,
  };
  const source: LiveConfigSource = {
    head: async (): Promise<StoredConfigHead | null> => {
      state.heads++;
      if (state.gate) await state.gate;
      if (state.fail) throw new Error("object down");
      return state.stored ? { version: state.stored.version, sha256: state.stored.sha256, base: state.stored.base } : null;
    },
    current: async () => {
      state.currents++;
      if (state.fail) throw new Error("object down");
      return state.stored;
    },
  };
  const store = (version: number, text: string) => {
    state.stored = { v: 1, version, text, sha256: sha256Hex(text), by: "human:root", at: 0, base: null };
  };
  return { state, source: () => source, store };
}

describe("a deploy after a reload", () => {
  it("stores the deployed var's hash with each version, and a later deploy of another var supersedes the stored versions", async () => {
    const o = env.CONFIG.get(env.CONFIG.idFromName("deploy-after-reload")) as unknown as ConfigApi;
    const deployed = "upstreams: [] # the var deployed when the reload happened";
    const base = sha256Hex(deployed);
    const r = await o.put(TEXT_A, sha256Hex(TEXT_A), "human:root", SIGNING, {}, base);
    expect(r).toEqual({ ok: true, changed: true, stored: { version: 1, sha256: sha256Hex(TEXT_A), base } });
    expect((await o.current())?.base).toBe(base);
    // The same text over another var is a new version (the base changed).
    expect(await o.put(TEXT_A, sha256Hex(TEXT_A), "human:root", SIGNING, {}, sha256Hex("other"))).toMatchObject({ ok: true, changed: true });
    const live = { version: 1, sha256: sha256Hex(TEXT_A), source: "stored" as const, base };
    // Running the var it was stored over: the stored version is in force.
    expect(supersededByDeploy({ ...env, PORTCULLIS_CONFIG: deployed } as typeof env, live)).toBe(false);
    // A new deploy (another var): the deploy wins.
    expect(supersededByDeploy({ ...env, PORTCULLIS_CONFIG: `${deployed}\n# redeployed` } as typeof env, live)).toBe(true);
    // A version stored with no var behind it is never superseded.
    expect(supersededByDeploy(env, { ...live, base: null })).toBe(false);
    expect(await o.put(TEXT_B, sha256Hex(TEXT_B), "human:root", SIGNING, {}, "not-a-hash")).toMatchObject({ ok: false });
  });
});

describe("LiveConfigCache", () => {
  it("serves the var while nothing is stored, then a stored version at most 1 s stale, with one head read per second and one text read per version", async () => {
    let t = 50_000;
    const changes: Array<[number, number]> = [];
    const cache = new LiveConfigCache({ now: () => t, onChange: (a, b) => changes.push([a, b]), log: () => undefined });
    const f = fakeSource();
    expect(await cache.live(f.source)).toEqual({ live: { version: 0, sha256: null, source: "var" }, text: null });
    expect(f.state.heads).toBe(1);
    f.store(1, TEXT_A);
    t += 999;
    // Within the second: the cached answer (the var), no read.
    expect((await cache.live(f.source)).live.source).toBe("var");
    expect(f.state.heads).toBe(1);
    t += 1;
    expect(await cache.live(f.source)).toEqual({ live: { version: 1, sha256: sha256Hex(TEXT_A), source: "stored", base: null }, text: TEXT_A });
    expect([f.state.heads, f.state.currents]).toEqual([2, 1]);
    // The same version: the head is read again each second, the text is not.
    for (let i = 0; i < 3; i++) {
      t += 1000;
      expect((await cache.live(f.source)).live.version).toBe(1);
    }
    expect([f.state.heads, f.state.currents]).toEqual([5, 1]);
    f.store(2, TEXT_B);
    t += 1000;
    expect(await cache.live(f.source)).toMatchObject({ live: { version: 2 }, text: TEXT_B });
    expect(changes).toEqual([
      [0, 1],
      [1, 2],
    ]);
  });

  it("a fresh read ignores the cache's age: a reload compares against what is stored now, not what this isolate read within the second", async () => {
    let t = 80_000;
    const cache = new LiveConfigCache({ now: () => t, log: () => undefined });
    const f = fakeSource();
    f.store(1, TEXT_A);
    expect((await cache.live(f.source)).live.version).toBe(1);
    f.store(2, TEXT_B);
    t += 10;
    // Within the second the cache still answers version 1; a fresh read sees version 2 at once.
    expect((await cache.live(f.source)).live.version).toBe(1);
    expect(await cache.live(f.source, true)).toMatchObject({ live: { version: 2 }, text: TEXT_B });
    expect([f.state.heads, f.state.currents]).toEqual([2, 2]);
    // And what it read is what the cache serves after it.
    expect((await cache.live(f.source)).live.version).toBe(2);
    expect(f.state.heads).toBe(2);
  });

  it("concurrent first callers each read for themselves (no read is shared across requests), the change is reported once, and callers within 1 s use the cache", async () => {
    const changes: [number, number][] = [];
    const cache = new LiveConfigCache({ now: () => 1, log: () => undefined, onChange: (a, b) => changes.push([a, b]) });
    const f = fakeSource();
    f.store(3, TEXT_A);
    let open!: () => void;
    f.state.gate = new Promise<void>((r) => {
      open = r;
    });
    const many = Array.from({ length: 10 }, () => cache.live(f.source));
    open();
    const out = await Promise.all(many);
    expect(out.every((o) => o.live.version === 3)).toBe(true);
    expect(f.state.heads).toBe(10);
    expect(changes).toEqual([[0, 3]]);
    expect((await cache.live(f.source)).live.version).toBe(3);
    expect(f.state.heads).toBe(10);
  });

  it("keeps the last good config when the object cannot be read (logged), and serves the var before any read succeeded", async () => {
    let t = 0;
    const logs: string[] = [];
    const cache = new LiveConfigCache({ now: () => t, log: (m) => logs.push(m) });
    const f = fakeSource();
    f.state.fail = true;
    expect((await cache.live(f.source)).live.source).toBe("var");
    expect(logs.at(-1)).toMatch(/could not be read \(object down\); serving the deployed config \(nothing read yet\)/);
    f.state.fail = false;
    f.store(4, TEXT_A);
    t += 1000;
    expect((await cache.live(f.source)).live.version).toBe(4);
    f.state.fail = true;
    f.store(5, TEXT_B);
    t += 1000;
    expect(await cache.live(f.source)).toMatchObject({ live: { version: 4, source: "stored" }, text: TEXT_A });
    expect(logs.at(-1)).toMatch(/serving the last good version 4/);
    // A failed read is not retried within the second (no hammering a down object)...
    const heads = f.state.heads;
    t += 500;
    await cache.live(f.source);
    expect(f.state.heads).toBe(heads);
    // ...and once it answers again the new version is served.
    f.state.fail = false;
    t += 500;
    expect((await cache.live(f.source)).live.version).toBe(5);
  });

  it("a read that does not answer in time counts as failed", async () => {
    const logs: string[] = [];
    const cache = new LiveConfigCache({ now: () => 0, readTimeoutMs: 50, log: (m) => logs.push(m) });
    const f = fakeSource();
    f.state.gate = new Promise<void>(() => undefined);
    expect((await cache.live(f.source)).live.source).toBe("var");
    expect(logs.at(-1)).toMatch(/did not answer within 50 ms/);
  });
});

describe("PUT /v1/config", () => {
  const GW = "http://127.0.0.1";
  async function token(sub: string, roles: string[]): Promise<string> {
    const keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
    return (await mintGrant(keys, { iss: GW, aud: GW, sub, team: "t", roles: roles as never, tools: ["*"], ttlSeconds: 600 }, { maxLifetimeSeconds: 86400 }))
      .token;
  }
  const put = (bearer: string, text: string) =>
    SELF.fetch(`${GW}/v1/config`, { method: "PUT", headers: { authorization: `Bearer ${bearer}`, "content-type": "text/yaml" }, body: text });

  it("refuses a broken config whole with every problem (no secret value), and a non-admin", async () => {
    const admin = await token("human:root", ["admin"]);
    const broken = `${(env.PORTCULLIS_CONFIG as string).replace("timeout: 2s", "timeout: forever")}\npolicy:\n  rules:\n    - name: r\n      when: "tool.name ==="\n      effect: deny\n`;
    const r = await put(admin, broken);
    expect(r.status).toBe(400);
    const body = (await r.json()) as { error: string; problems: string[] };
    expect(body.error).toBe("invalid_config");
    expect(body.problems.length).toBeGreaterThanOrEqual(1);
    expect(JSON.stringify(body)).not.toContain(env.PORTCULLIS_SIGNING_KEY as string);
    const missing = await put(admin, `${env.PORTCULLIS_CONFIG as string}    headers:\n      authorization: "Bearer \${NO_SUCH_SECRET_X}"\n`);
    expect(missing.status).toBe(400);
    expect(JSON.stringify(await missing.json())).toMatch(/NO_SUCH_SECRET_X/);
    const op = await token("human:op", ["operator"]);
    expect((await put(op, env.PORTCULLIS_CONFIG as string)).status).toBe(403);
    // Nothing was stored: the gateway still serves the var's config.
    expect((await SELF.fetch(`${GW}/.well-known/oauth-protected-resource`)).status).toBe(200);
  });
});
