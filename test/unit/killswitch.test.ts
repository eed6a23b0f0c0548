/**
 * The kill switch in workerd: KillSwitchDO transitions and versions through real stubs (a fresh
 * object per test, so no test sees another's halts), one `killswitch.changed` record on the
 * `_global` chain per change (read back from its LedgerDO) and none for a change that changes
 * nothing, a refused change when the ledger append fails (nothing changes); the reader's cache
 * (≤ 1 s, counted from when a read started, no read in flight shared (Workers cancels a promise's continuations when its request ends), failures thrown and not
 * kept) on a controllable clock; an unreadable kill switch throws through the isolate's reader;
 * haltableLeg with a fake leg and a fake reader (a halt covering the call aborts it, posts
 * `notifications/cancelled` under the upstream id to a legacy upstream, reports uncertain; a
 * halt of another scope changes nothing; its timers stop with the leg); and the JSON API and
 * operator tools as an admin, an operator and an auditor use them (SELF).
 */
import { env, SELF } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { changeProblem } from "../../durable-objects/killswitch.ts";
import { killSwitchObject, ledgerObject } from "../../durable-objects/object-names.ts";
import { GLOBAL_CHAIN } from "../../src/ledger/records.ts";
import { type KillSwitchApi, type KillSwitchSnapshot, killSwitchChangeProblem } from "../../durable-objects/contract-killswitch.ts";
import type { LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { Env } from "../../src/env.ts";
import type { KillSwitchReader, KillSwitchState } from "../../src/governance/halts.ts";
import type { LegResult, ToolCall } from "../../src/governance/steps.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import type { CallContext } from "../../src/protocol/call-context.ts";
import { cachedKillSwitchReader, changeKillSwitch, haltableLeg, killSwitchReader, killSwitchStatus, stateOf } from "../../src/ports/killswitch-client.ts";
import { configOr503 } from "../../src/routes/config-view.ts";
import type { JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { haltFor } from "../../src/governance/halts.ts";
import { NO_LEDGER } from "../../src/governance/steps.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import { testConfig, testUpstream } from "./fixtures.ts";
import { allEntries } from "./fixtures.ts";

const SIGNING: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "http://127.0.0.1" };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let n = 0;
/** A KillSwitchDO of its own for one test (the class does not care what it is named). */
const freshObject = (): KillSwitchApi => env.KILLSWITCH.get(env.KILLSWITCH.idFromName(`test:${Date.now()}:${n++}`)) as unknown as KillSwitchApi;

/** Every entry of the `_global` chain. */
const globalEntries = () => allEntries(ledgerObject(env, GLOBAL_CHAIN)!);
const changesBy = async (by: string) => (await globalEntries()).filter((e) => e.kind === "killswitch.changed" && e.body.by === by);

// Runs first: the isolate's reader has read nothing yet, so nothing cached can hide the failure.
describe("the isolate's reader", () => {
  it("an unreadable kill switch throws — never 'not halted' — and the failure is not kept", async () => {
    const broken = {
      ...env,
      KILLSWITCH: { idFromName: () => ({}), get: () => ({ state: async () => Promise.reject(new Error("object down")) }) },
    } as unknown as Env;
    await expect(killSwitchReader(broken).read()).rejects.toThrow(/object down/);
    expect(await killSwitchStatus(broken)).toMatchObject({ ok: false, status: 503, message: expect.stringMatching(/could not be read \(object down\)/) });
    // The next read goes to storage again (the failure was not cached) and reads the real object.
    const s = await killSwitchReader(env).read();
    expect(typeof s.version).toBe("number");
    expect(Array.isArray(s.halts)).toBe(true);
  });
});

describe("changeProblem (the object's validation)", () => {
  it("names the field that is wrong", () => {
    expect(changeProblem("global", null, "incident 1", "human:root")).toBeNull();
    expect(changeProblem("tool", "alpha__send", "incident 1", "human:root")).toBeNull();
    expect(changeProblem("planet", "x", "r", "a")).toMatch(/scope must be one of global, team, upstream, tool, principal, grant/);
    expect(changeProblem("global", "x", "r", "a")).toMatch(/global halt takes no target/);
    for (const s of ["team", "upstream", "tool", "principal", "grant"]) expect(changeProblem(s, null, "r", "a")).toMatch(/needs a target/);
    expect(changeProblem("tool", "", "r", "a")).toMatch(/needs a target/);
    expect(changeProblem("tool", "t".repeat(257), "r", "a")).toMatch(/at most 256/);
    expect(changeProblem("tool", "t".repeat(256), "r", "a")).toBeNull();
    expect(changeProblem("tool", "t", "   ", "a")).toMatch(/reason is required/);
    expect(changeProblem("tool", "t", "r".repeat(501), "a")).toMatch(/at most 500/);
    expect(changeProblem("tool", "t", "r".repeat(500), "a")).toBeNull();
    expect(changeProblem("tool", "t", "r", "")).toMatch(/actor/);
  });
  it("is the shared rules the Worker's client runs (killSwitchChangeProblem), plus the actor check only the object makes", () => {
    const cases: [unknown, unknown, unknown][] = [
      ["global", null, "incident 1"],
      ["global", undefined, "r"],
      ["planet", "x", "r"],
      [7, "x", "r"],
      ["global", "x", "r"],
      ["grant", null, "r"],
      ["tool", "", "r"],
      ["tool", "t".repeat(257), "r"],
      ["tool", "t".repeat(256), "r"],
      ["tool", "t", "   "],
      ["tool", "t", 5],
      ["tool", "t", "r".repeat(501)],
      ["tool", "t", "r".repeat(500)],
    ];
    for (const [scope, target, reason] of cases)
      expect(changeProblem(scope, target, reason, "human:root")).toBe(killSwitchChangeProblem(scope, target, reason));
    expect(killSwitchChangeProblem("tool", "t", "r")).toBeNull();
    for (const by of ["", "a".repeat(257), null]) expect(changeProblem("tool", "t", "r", by)).toBe("the actor (by) must be 1-256 characters");
    expect(changeProblem("tool", "t", "r", "a".repeat(256))).toBeNull();
  });
});

describe("KillSwitchDO", () => {
  it("halts and resumes by (scope, target), counting every change in its version; a resume of what is not halted changes nothing", async () => {
    const ks = freshObject();
    expect(await ks.state()).toEqual({ version: 0, halts: [] });
    const g = await ks.halt("global", null, "incident 1", "human:root", SIGNING);
    expect(g).toMatchObject({
      ok: true,
      changed: true,
      snapshot: { version: 1, halts: [{ v: 1, scope: "global", target: null, reason: "incident 1", by: "human:root" }] },
    });
    expect(await ks.halt("tool", "alpha__send", "bad sends", "human:root", SIGNING)).toMatchObject({ ok: true, changed: true, snapshot: { version: 2 } });
    // Halting a halted scope again replaces its reason and actor: a change.
    const again = await ks.halt("tool", "alpha__send", "still bad", "human:ops", SIGNING);
    expect(again.ok && again.snapshot.version).toBe(3);
    expect(again.ok && again.snapshot.halts.find((h) => h.scope === "tool")).toMatchObject({ target: "alpha__send", reason: "still bad", by: "human:ops" });
    expect(again.ok && again.snapshot.halts).toHaveLength(2);
    // The same target under another scope is another halt.
    expect(await ks.halt("upstream", "alpha__send", "u", "human:root", SIGNING)).toMatchObject({ ok: true, snapshot: { version: 4 } });
    // Resuming what is not halted: ok, nothing changed, the version stays.
    expect(await ks.resume("tool", "beta__read", "nothing to lift", "human:root", SIGNING)).toMatchObject({
      ok: true,
      changed: false,
      snapshot: { version: 4 },
    });
    expect(await ks.resume("tool", "alpha__send", "fixed", "human:root", SIGNING)).toMatchObject({ ok: true, changed: true, snapshot: { version: 5 } });
    expect(await ks.resume("global", null, "over", "human:root", SIGNING)).toMatchObject({ ok: true, changed: true, snapshot: { version: 6 } });
    const s = await ks.state();
    expect(s.version).toBe(6);
    expect(s.halts.map((h) => [h.scope, h.target])).toEqual([["upstream", "alpha__send"]]);
  });

  it("refuses malformed changes and changes nothing", async () => {
    const ks = freshObject();
    await ks.halt("team", "red", "r", "human:root", SIGNING);
    const bad: Array<[string, string | null, string]> = [
      ["planet", "x", "r"],
      ["global", "x", "r"],
      ["team", null, "r"],
      ["team", "blue", ""],
      ["team", "blue", "r".repeat(501)],
      ["grant", "j".repeat(257), "r"],
    ];
    for (const [scope, target, reason] of bad) {
      const out = await ks.halt(scope as never, target, reason, "human:root", SIGNING);
      expect(out.ok, `${scope} ${target} ${reason.length}`).toBe(false);
      expect((await ks.resume(scope as never, target, reason, "human:root", SIGNING)).ok).toBe(false);
    }
    expect(await ks.state()).toMatchObject({ version: 1, halts: [{ scope: "team", target: "red" }] });
  });

  it("writes one killswitch.changed record per change to the _global chain, with the version after the change — and none for a no-op", async () => {
    const ks = freshObject();
    const by = `human:ledger-${Date.now()}`;
    await ks.halt("global", null, "g", by, SIGNING);
    await ks.halt("principal", "agent:x", "p", by, SIGNING);
    await ks.resume("principal", "agent:nobody", "noop", by, SIGNING);
    await ks.resume("principal", "agent:x", "lifted", by, SIGNING);
    const records = await changesBy(by);
    expect(records.map((e) => e.body)).toEqual([
      { action: "halt", scope: "global", target: null, reason: "g", by, version: 1 },
      { action: "halt", scope: "principal", target: "agent:x", reason: "p", by, version: 2 },
      { action: "resume", scope: "principal", target: "agent:x", reason: "lifted", by, version: 3 },
    ]);
    for (const e of records) expect(e.chain).toBe(GLOBAL_CHAIN);
  });

  it("refuses a change whose ledger record cannot be written, and changes nothing", async () => {
    const ks = freshObject();
    const by = `human:unrecorded-${Date.now()}`;
    await ks.halt("tool", "t1", "first", by, SIGNING);
    // Signing settings the ledger refuses: its append throws, so the change must not happen.
    const broken = { secret: 7, gateway: null } as unknown as LedgerSigning;
    const out = await ks.halt("global", null, "unrecorded", by, broken);
    expect(out).toMatchObject({ ok: false, message: expect.stringMatching(/did not change: its ledger record could not be written/) });
    const lift = await ks.resume("tool", "t1", "unrecorded lift", by, broken);
    expect(lift.ok).toBe(false);
    expect(await ks.state()).toMatchObject({ version: 1, halts: [{ scope: "tool", target: "t1", reason: "first" }] });
    expect((await changesBy(by)).map((e) => e.body.reason)).toEqual(["first"]);
  });
});

describe("cachedKillSwitchReader", () => {
  const snap = (version: number, halts: KillSwitchSnapshot["halts"] = []): KillSwitchSnapshot => ({ version, halts });

  it("serves one read for less than 1000 ms from when it started, then reads again", async () => {
    let t = 10_000;
    let loads = 0;
    const r = cachedKillSwitchReader(
      async () => snap(++loads),
      () => t,
    );
    expect((await r.read()).version).toBe(1);
    t += 500;
    expect((await r.read()).version).toBe(1);
    t += 499; // 999 ms after the read started
    expect((await r.read()).version).toBe(1);
    t += 1; // 1000 ms: stale
    expect((await r.read()).version).toBe(2);
    expect(loads).toBe(2);
    t += 5000;
    expect((await r.read()).version).toBe(3);
  });

  it("counts the age from when the read started, not from when it answered", async () => {
    let t = 0;
    let release: (s: KillSwitchSnapshot) => void = () => undefined;
    let loads = 0;
    const r = cachedKillSwitchReader(
      () => {
        loads++;
        return new Promise<KillSwitchSnapshot>((res) => (release = res));
      },
      () => t,
    );
    const first = r.read();
    t = 800; // the answer comes 800 ms after the read began
    release(snap(1));
    expect((await first).version).toBe(1);
    t = 999;
    expect((await r.read()).version).toBe(1);
    t = 1000;
    const next = r.read();
    release(snap(2));
    expect((await next).version).toBe(2);
    expect(loads).toBe(2);
  });

  it("shares no read in flight: concurrent callers without fresh state each read, and then the newest read serves", async () => {
    let loads = 0;
    const releases: ((s: KillSwitchSnapshot) => void)[] = [];
    const r = cachedKillSwitchReader(
      () => {
        loads++;
        return new Promise<KillSwitchSnapshot>((res) => releases.push(res));
      },
      () => 0,
    );
    const all = Promise.all(Array.from({ length: 5 }, () => r.read()));
    expect(loads).toBe(5);
    for (const release of releases) release(snap(7, [{ v: 1, scope: "global", target: null, reason: "g", by: "a", at: 1 }]));
    const states = await all;
    for (const s of states) expect(s).toEqual({ version: 7, halts: [{ scope: "global", reason: "g" }] });
    expect((await r.read()).version).toBe(7);
    expect(loads).toBe(5);
  });

  it("throws a failed read to its caller and does not keep it; the next read loads again", async () => {
    let fail = true;
    let loads = 0;
    const r = cachedKillSwitchReader(
      async () => {
        loads++;
        if (fail) throw new Error("storage unavailable");
        return snap(3);
      },
      () => 0,
    );
    const both = await Promise.allSettled([r.read(), r.read()]);
    expect(both.map((b) => b.status)).toEqual(["rejected", "rejected"]);
    expect(loads).toBe(2);
    fail = false;
    expect((await r.read()).version).toBe(3);
    expect(loads).toBe(3);
  });

  it("turns records into halts (a null target is absent) and refuses what is not a state", async () => {
    expect(
      stateOf(
        snap(2, [
          { v: 1, scope: "global", target: null, reason: "g", by: "a", at: 1 },
          { v: 1, scope: "grant", target: "jti-1", reason: "leaked", by: "a", at: 2 },
        ]),
      ),
    ).toEqual({
      version: 2,
      halts: [
        { scope: "global", reason: "g" },
        { scope: "grant", target: "jti-1", reason: "leaked" },
      ],
    });
    const r = cachedKillSwitchReader(async () => ({ halts: "none" }) as unknown as KillSwitchSnapshot);
    await expect(r.read()).rejects.toThrow(/not a state/);
  });
});

// ---- haltableLeg ------------------------------------------------------------------------------

const UP = testUpstream("alpha", "http://127.0.0.1:9001/mcp", { egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true } });
const PRINCIPAL: Principal = { sub: "agent:leg", team: "red", roles: ["agent"], tools: null, authenticated: true, jti: "jti-leg-1" };
const REQUEST: JsonRpcRequest = { jsonrpc: "2.0", id: 41, method: "tools/call", params: { name: "alpha__slow", arguments: {} } };
const CALL: ToolCall = { principal: PRINCIPAL, era: "legacy", request: REQUEST, exposedName: "alpha__slow", arguments: {}, runId: null };

/** A reader whose state the test sets; counts its reads. */
function fakeReader(): KillSwitchReader & { state: KillSwitchState; reads: number; fail: boolean } {
  const r = {
    state: { version: 0, halts: [] } as KillSwitchState,
    reads: 0,
    fail: false,
    read: async () => {
      r.reads++;
      if (r.fail) throw new Error("unreadable");
      return r.state;
    },
  };
  return r;
}

function legCtx(era: "legacy" | "modern"): CallContext & { recorded: string[] } {
  const recorded: string[] = [];
  return {
    cfg: testConfig([UP]),
    era: "legacy",
    principal: PRINCIPAL,
    signal: new AbortController().signal,
    paramHeaders: [],
    callerFiltered: false,
    runId: null,
    legs: {
      leg: async () => (era === "legacy" ? { era: "legacy", sessionId: "up-session-1", protocolVersion: "2025-11-25" } : { era: "modern", meta: {} }),
      renew: async () => null,
      capabilities: async () => undefined,
      recordRequest: async (_id, _up, upstreamId) => {
        recorded.push(upstreamId);
      },
    },
    stores: {
      ledger: { ...NO_LEDGER, listed: () => undefined, hold: async () => "" },
    },
    relay: { send: async () => undefined, upstreamRequest: async () => undefined },
    recorded,
  };
}

/** A fake leg: records the upstream id like forward.ts, then answers after `ms` unless its signal aborts first. */
function slowRun(ms: number) {
  const seen: { signal?: AbortSignal; aborted: boolean } = { aborted: false };
  const run = async (c: CallContext): Promise<LegResult> => {
    seen.signal = c.signal;
    await c.legs.recordRequest(REQUEST.id, UP, "pc:test:1");
    return new Promise<LegResult>((resolve) => {
      const t = setTimeout(() => resolve({ kind: "answered", response: { jsonrpc: "2.0", id: 41, result: { content: [] } }, status: 200 }), ms);
      c.signal.addEventListener("abort", () => {
        clearTimeout(t);
        seen.aborted = true;
        resolve({ kind: "uncertain", reason: "upstream alpha: request aborted" });
      });
    });
  };
  return { run, seen };
}

let posted: JsonObject[] = [];
function recordFetch() {
  posted = [];
  vi.spyOn(globalThis, "fetch").mockImplementation(async (_input, init) => {
    posted.push(JSON.parse(String(init?.body ?? "null")) as JsonObject);
    return new Response(null, { status: 202 });
  });
}
afterEach(() => vi.restoreAllMocks());

describe("haltableLeg", () => {
  it("a halt covering the call while it runs aborts it, cancels it upstream under the upstream's id (legacy), and reports uncertain naming the halt", async () => {
    recordFetch();
    const reader = fakeReader();
    const ctx = legCtx("legacy");
    const { run, seen } = slowRun(10_000);
    const started = Date.now();
    setTimeout(() => {
      reader.state = { version: 1, halts: [{ scope: "tool", target: "alpha__slow", reason: "incident 42" }] };
    }, 100);
    const out = await haltableLeg(ctx, reader, CALL, UP, run);
    const took = Date.now() - started;
    expect(out).toEqual({ kind: "uncertain", reason: "cancelled by the kill switch: halted (tool alpha__slow): incident 42" });
    expect(seen.aborted).toBe(true);
    expect(seen.signal?.aborted).toBe(true);
    expect(took).toBeLessThan(1000); // polled every 250 ms through the reader
    // The front's own recordRequest still ran (the client's cancellation keeps working).
    expect(ctx.recorded).toEqual(["pc:test:1"]);
    expect(posted).toEqual([
      {
        jsonrpc: "2.0",
        method: "notifications/cancelled",
        params: { requestId: "pc:test:1", reason: "cancelled by the kill switch: halted (tool alpha__slow): incident 42" },
      },
    ]);
    // Its timers stopped with it: the reader is not read again.
    const reads = reader.reads;
    await sleep(700);
    expect(reader.reads).toBe(reads);
  });

  it("cancels a modern upstream's call by closing its stream only (no notification)", async () => {
    recordFetch();
    const reader = fakeReader();
    const { run, seen } = slowRun(10_000);
    setTimeout(() => {
      reader.state = { version: 1, halts: [{ scope: "global", reason: "all stop" }] };
    }, 50);
    const out = await haltableLeg(legCtx("modern"), reader, CALL, UP, run);
    expect(out).toEqual({ kind: "uncertain", reason: "cancelled by the kill switch: halted (global): all stop" });
    expect(seen.aborted).toBe(true);
    expect(posted).toEqual([]);
  });

  it("a halt of another scope (another tool, team, principal, grant or upstream) leaves the call alone, and polling stops when it answers", async () => {
    recordFetch();
    const reader = fakeReader();
    reader.state = {
      version: 5,
      halts: [
        { scope: "tool", target: "alpha__other", reason: "x" },
        { scope: "team", target: "blue", reason: "x" },
        { scope: "principal", target: "agent:someone-else", reason: "x" },
        { scope: "grant", target: "jti-other", reason: "x" },
        { scope: "upstream", target: "beta", reason: "x" },
      ],
    };
    const { run, seen } = slowRun(700);
    const out = await haltableLeg(legCtx("legacy"), reader, CALL, UP, run);
    expect(out.kind).toBe("answered");
    expect(seen.aborted).toBe(false);
    expect(posted).toEqual([]);
    expect(reader.reads).toBeGreaterThanOrEqual(3); // once before, then every 250 ms
    const reads = reader.reads;
    await sleep(600);
    expect(reader.reads).toBe(reads);
  });

  it("a leg that answers at once leaves no timer behind; one the kill switch already covers is never sent", async () => {
    const reader = fakeReader();
    let ran = 0;
    const quick = async (): Promise<LegResult> => {
      ran++;
      return { kind: "answered", response: { jsonrpc: "2.0", id: 41, result: {} }, status: 200 };
    };
    expect((await haltableLeg(legCtx("legacy"), reader, CALL, UP, quick)).kind).toBe("answered");
    const reads = reader.reads;
    await sleep(400);
    expect(reader.reads).toBe(reads);
    reader.state = { version: 2, halts: [{ scope: "grant", target: "jti-leg-1", reason: "leaked" }] };
    expect(await haltableLeg(legCtx("legacy"), reader, CALL, UP, quick)).toEqual({
      kind: "uncertain",
      reason: "cancelled by the kill switch before it was sent: halted (grant jti-leg-1): leaked",
    });
    expect(ran).toBe(1);
  });

  it("a kill switch that becomes unreadable while a call runs does not cancel it; one unreadable before it starts refuses to send", async () => {
    const reader = fakeReader();
    const { run, seen } = slowRun(600);
    setTimeout(() => {
      reader.fail = true;
    }, 100);
    expect((await haltableLeg(legCtx("legacy"), reader, CALL, UP, run)).kind).toBe("answered");
    expect(seen.aborted).toBe(false);
    const out = await haltableLeg(legCtx("legacy"), reader, CALL, UP, run);
    expect(out).toMatchObject({ kind: "failed", auth: false, reason: expect.stringMatching(/kill switch could not answer .*not sent/) });
  });
});

// ---- changeKillSwitch, the JSON API and the operator tools ------------------------------------

const GW = "http://127.0.0.1";
async function token(roles: string[], sub: string): Promise<string> {
  const keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
  return (await mintGrant(keys, { iss: GW, aud: GW, sub, team: "t", roles: roles as never, tools: ["*"], ttlSeconds: 600 }, { maxLifetimeSeconds: 86400 }))
    .token;
}
const api = (path: string, bearer: string, body?: string) =>
  SELF.fetch(`${GW}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${bearer}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body }),
  });
async function operator(bearer: string, method: string, params: JsonObject = {}): Promise<JsonObject> {
  const r = await SELF.fetch(`${GW}/operator/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${bearer}` },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  return ((await r.json()) as { result: JsonObject }).result;
}

describe("changeKillSwitch, /v1/killswitch and the operator tools", () => {
  it("only an admin changes it (the actor is its grant's principal); malformed changes are 400", async () => {
    const cfg = configOr503(env);
    if (cfg instanceof Response) throw new Error("the unit config did not load");
    const before = (await killSwitchObject(env).state()).version;
    const op: Principal = { sub: "human:op", team: "t", roles: ["operator"], tools: null, authenticated: true };
    expect(await changeKillSwitch(env, cfg, op, "halt", "global", null, "no")).toMatchObject({ ok: false, status: 403 });
    const root: Principal = { sub: "human:svc-root", team: "t", roles: ["admin"], tools: null, authenticated: true };
    expect(await changeKillSwitch(env, cfg, root, "halt", "tool", null, "r")).toMatchObject({
      ok: false,
      status: 400,
      message: expect.stringMatching(/needs a target/),
    });
    expect((await killSwitchObject(env).state()).version).toBe(before);
    const target = `alpha__svc-${Date.now()}`;
    const h = await changeKillSwitch(env, cfg, root, "halt", "tool", target, "svc test");
    expect(h).toMatchObject({ ok: true, changed: true, snapshot: { version: before + 1 } });
    expect((await changesBy("human:svc-root")).at(-1)?.body).toEqual({
      action: "halt",
      scope: "tool",
      target,
      reason: "svc test",
      by: "human:svc-root",
      version: before + 1,
    });
    expect(await changeKillSwitch(env, cfg, root, "resume", "tool", target, "done")).toMatchObject({
      ok: true,
      changed: true,
      snapshot: { version: before + 2 },
    });
  });

  it("GET answers the real state to an auditor; POST is admin-only and 400s bad bodies with a readable error", async () => {
    const admin = await token(["admin"], "human:http-root");
    const auditor = await token(["auditor"], "human:aud");
    const agent = await token(["agent"], "agent:a");
    const target = `alpha__http-${Date.now()}`;
    const halt = await api("/v1/killswitch/halt", admin, JSON.stringify({ scope: "tool", target, reason: "http test" }));
    expect(halt.status).toBe(200);
    const body = (await halt.json()) as { changed: boolean; version: number; halts: JsonObject[] };
    expect(body.changed).toBe(true);
    expect(body.halts).toContainEqual({ scope: "tool", target, reason: "http test", by: "human:http-root", at: expect.any(String) });
    const status = await api("/v1/killswitch", auditor);
    expect(status.status).toBe(200);
    expect(((await status.json()) as { version: number }).version).toBe(body.version);
    expect((await api("/v1/killswitch", agent)).status).toBe(403);
    expect((await api("/v1/killswitch/halt", auditor, JSON.stringify({ scope: "global", reason: "no" }))).status).toBe(403);
    for (const [raw, why] of [
      ["{not json", /JSON object/],
      ["[1]", /JSON object/],
      [JSON.stringify({ scope: "tool", reason: "r" }), /needs a target/],
      [JSON.stringify({ scope: "moon", target: "x", reason: "r" }), /scope must be one of/],
      [JSON.stringify({ scope: "global", reason: "" }), /reason is required/],
      [JSON.stringify({ scope: "global", reason: "r", by: "someone-else" }), /unknown field by/],
    ] as const) {
      const r = await api("/v1/killswitch/halt", admin, raw);
      expect(r.status, raw).toBe(400);
      expect(((await r.json()) as { error_description: string }).error_description).toMatch(why);
    }
    expect(((await (await api("/v1/killswitch", auditor)).json()) as { version: number }).version).toBe(body.version);
    const resume = await api("/v1/killswitch/resume", admin, JSON.stringify({ scope: "tool", target, reason: "over" }));
    expect(resume.status).toBe(200);
    expect(((await resume.json()) as { halts: JsonObject[] }).halts.some((h) => h.target === target)).toBe(false);
  });

  it("portcullis.status for every operator role, portcullis.halt and resume for admins only", async () => {
    const admin = await token(["admin"], "human:tool-root");
    const approver = await token(["approver"], "human:appr");
    const listed = (r: JsonObject) => (r.tools as JsonObject[]).map((t) => t.name);
    expect(listed(await operator(approver, "tools/list"))).toContain("portcullis.status");
    expect(listed(await operator(approver, "tools/list"))).not.toContain("portcullis.halt");
    expect(listed(await operator(admin, "tools/list"))).toEqual(expect.arrayContaining(["portcullis.halt", "portcullis.resume", "portcullis.status"]));
    const status = await operator(approver, "tools/call", { name: "portcullis.status", arguments: {} });
    expect((status.structuredContent as JsonObject).version).toEqual(expect.any(Number));
    const target = `team-${Date.now()}`;
    const halted = await operator(admin, "tools/call", { name: "portcullis.halt", arguments: { scope: "team", target, reason: "tool test" } });
    expect(halted.isError).toBeUndefined();
    expect((halted.structuredContent as { halts: JsonObject[] }).halts).toContainEqual(
      expect.objectContaining({ scope: "team", target, by: "human:tool-root" }),
    );
    const refused = await operator(admin, "tools/call", { name: "portcullis.halt", arguments: { scope: "team", reason: "no target" } });
    expect(refused.isError).toBe(true);
    const denied = await operator(approver, "tools/call", { name: "portcullis.resume", arguments: { scope: "team", target, reason: "not mine" } });
    expect(denied).toBeUndefined(); // an unknown tool for this role: a JSON-RPC error, no result
    const resumed = await operator(admin, "tools/call", { name: "portcullis.resume", arguments: { scope: "team", target, reason: "over" } });
    expect((resumed.structuredContent as { changed: boolean }).changed).toBe(true);
  });
});

describe("haltFor: a halt of a principal or team covers every spelling of it", () => {
  const halt = (scope: "principal" | "team", target: string) => ({ version: 1, halts: [{ scope, target, reason: "incident", by: "human:root" }] });
  it("a halt typed Agent:Leg stops agent:leg (folded names: a halt can only cover more), and never another principal", () => {
    expect(haltFor(halt("principal", "Agent:Leg") as KillSwitchState, CALL, UP)).toMatchObject({ check: "kill_switch" });
    expect(haltFor(halt("principal", "agent:leg") as KillSwitchState, CALL, UP)).toMatchObject({ check: "kill_switch" });
    expect(haltFor(halt("team", "RED") as KillSwitchState, CALL, UP)).toMatchObject({ check: "kill_switch" });
    expect(haltFor(halt("principal", "agent:other") as KillSwitchState, CALL, UP)).toBeNull();
    expect(haltFor(halt("team", "blue") as KillSwitchState, CALL, UP)).toBeNull();
  });
  it("a tool halt covers the tool by the name agents call, by <upstream>/<tool> and by the upstream's own name: a rename never lifts it", () => {
    const tool = (target: string) => ({ version: 1, halts: [{ scope: "tool", target, reason: "incident", by: "human:root" }] }) as unknown as KillSwitchState;
    for (const target of ["alpha__slow", "alpha/slow", "slow"]) expect(haltFor(tool(target), CALL, UP, "slow"), target).toMatchObject({ check: "kill_switch" });
    // The same tool exposed under its own name (the upstream served transparently): the halts written for either name still cover it.
    const bare = { ...CALL, exposedName: "slow" };
    for (const target of ["alpha__slow", "alpha/slow", "slow"]) expect(haltFor(tool(target), bare, UP, "slow"), target).toMatchObject({ check: "kill_switch" });
    expect(haltFor(tool("beta/slow"), CALL, UP, "slow")).toBeNull();
    expect(haltFor(tool("fast"), CALL, UP, "slow")).toBeNull();
    // Without the own name (a caller that has none), the exposed name alone.
    expect(haltFor(tool("slow"), CALL, UP)).toBeNull();
  });
});
