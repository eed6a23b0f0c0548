/**
 * Input rounds (src/upstream/rounds.ts, src/governance/call.ts continueRounds), offline: the
 * parked call's state machine over scripted upstream frames (requests that arrive together make
 * one round under keys from their ids; answers go upstream as responses; undeclared capabilities
 * are refused upstream; pre-given answers are used; an unanswered key is asked again; a stream
 * that ends unanswered fails uncertain), the round token (another principal's, another call's, an
 * altered or a malformed one never opens), and governance across rounds with fakes (one decision,
 * one admission, a round record per round, one outcome; a bad token refused with -32602 and
 * nothing forwarded; a halt between rounds cancels the parked call and settles it uncertain).
 * Must never: reach a network.
 */
import { describe, expect, it } from "vitest";
import type { Principal } from "../../src/config/principal.ts";
import { governToolCall } from "../../src/governance/call.ts";
import type { GovernanceDeps } from "../../src/governance/call-decide.ts";
import { catalogEntry } from "../../src/governance/catalog-entry.ts";
import { type LegResult, type RoundRef, NO_HISTORY, NO_HOLDS, NO_MAPPINGS, OPEN_POLICY, type ToolCall } from "../../src/governance/steps.ts";
import type { CallRounds, RoundState } from "../../src/governance/round-steps.ts";
import { type Frame, UpstreamSessionGone, UpstreamUncertain } from "../../src/upstream/exchange.ts";
import { bindingDigest, newRoundId, openRoundToken, ParkedCall, type RoundBinding, roundToken } from "../../src/upstream/rounds.ts";
import type { JsonObject, JsonRpcMessage } from "../../src/wire/jsonrpc.ts";
import { testUpstream } from "./fixtures.ts";

/** A scripted upstream stream: frames pushed by the test, read by the parked call. */
function script() {
  const queue: (Frame | "end")[] = [];
  const waiting: ((r: IteratorResult<Frame>) => void)[] = [];
  const posted: JsonRpcMessage[] = [];
  const deliver = (f: Frame | "end") => {
    const w = waiting.shift();
    if (!w) return void queue.push(f);
    w(f === "end" ? { done: true, value: undefined } : { done: false, value: f });
  };
  const frames: AsyncIterator<Frame> = {
    next: () =>
      new Promise((resolve) => {
        const f = queue.shift();
        if (f === undefined) return void waiting.push(resolve);
        resolve(f === "end" ? { done: true, value: undefined } : { done: false, value: f });
      }),
  };
  return {
    io: { frames, post: async (m: JsonRpcMessage) => void posted.push(m) },
    posted,
    send: (message: JsonRpcMessage) => deliver({ message, status: 200 }),
    end: () => deliver("end"),
  };
}

const ask = (id: string | number, method: string, params: JsonObject = {}): JsonRpcMessage => ({ jsonrpc: "2.0", id, method, params });
const ALL = { elicitation: {}, sampling: {}, roots: {} };

describe("ParkedCall", () => {
  it("gathers the requests that arrive together into one round, delivers the answers upstream, and ends with the response and its notifications", async () => {
    const s = script();
    const call = new ParkedCall(s.io, ALL, "up-1");
    s.send(ask("user_name", "elicitation/create", { message: "name?" }));
    s.send(ask(7, "sampling/createMessage", { maxTokens: 5 }));
    s.send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: 1, progress: 1 } });
    const first = await call.next();
    expect(first.kind).toBe("input");
    if (first.kind !== "input") return;
    expect(first.requests).toEqual({
      user_name: { method: "elicitation/create", params: { message: "name?" } },
      "7": { method: "sampling/createMessage", params: { maxTokens: 5 } },
    });
    expect(first.interim.map((m) => m.method)).toEqual(["notifications/progress"]);
    await call.answer(
      { user_name: { action: "accept", content: { name: "Ada" } }, "7": { role: "assistant", content: { type: "text", text: "hi" } }, extra: { x: 1 } },
      ALL,
    );
    expect(s.posted).toHaveLength(2); // the extra key asked nothing: ignored
    expect(s.posted).toEqual(
      expect.arrayContaining([
        { jsonrpc: "2.0", id: "user_name", result: { action: "accept", content: { name: "Ada" } } },
        { jsonrpc: "2.0", id: 7, result: { role: "assistant", content: { type: "text", text: "hi" } } },
      ]),
    );
    const next = call.next();
    s.send({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: "x" } });
    s.send({ jsonrpc: "2.0", id: "up-1", result: { content: [] } });
    const done = await next;
    expect(done).toMatchObject({ kind: "answered", response: { id: "up-1", result: { content: [] } }, interim: [{ method: "notifications/message" }] });
    expect(call.done).toBe(true);
  });

  it("refuses upstream what the client did not declare, answers ping, and uses answers the client gave before it was asked", async () => {
    const s = script();
    const call = new ParkedCall(s.io, { elicitation: {} }, "up-2", { known: { action: "accept", content: { a: 1 } } });
    s.send(ask("s1", "sampling/createMessage"));
    s.send(ask("p1", "ping"));
    s.send(ask("known", "elicitation/create"));
    s.send(ask("odd id with spaces", "elicitation/create"));
    const r = await call.next();
    expect(r.kind).toBe("input");
    if (r.kind !== "input") return;
    const keys = Object.keys(r.requests);
    expect(keys).toHaveLength(1);
    expect(keys[0]).toMatch(/^input-[0-9a-f]{8}$/);
    expect(s.posted[0]).toMatchObject({ id: "s1", error: { code: -32601, message: expect.stringContaining("did not declare the sampling capability") } });
    expect(s.posted[1]).toEqual({ jsonrpc: "2.0", id: "p1", result: {} });
    expect(s.posted[2]).toEqual({ jsonrpc: "2.0", id: "known", result: { action: "accept", content: { a: 1 } } });
  });

  it("asks an unanswered key again, and fails uncertain when the stream ends unanswered", async () => {
    const s = script();
    const call = new ParkedCall(s.io, ALL, "up-3");
    s.send(ask("a", "roots/list"));
    s.send(ask("b", "roots/list"));
    expect(Object.keys(((await call.next()) as { requests: JsonObject }).requests)).toEqual(["a", "b"]);
    await call.answer({ a: { roots: [] }, b: 12 }, ALL); // b is not an object: not an answer
    expect(s.posted.map((m) => (m as { id: string }).id)).toEqual(["a"]);
    expect(Object.keys(((await call.next()) as { requests: JsonObject }).requests)).toEqual(["b"]);
    await call.answer({ b: { roots: [] } }, ALL);
    const end = call.next();
    s.end();
    expect(await end).toMatchObject({ kind: "failed", uncertain: true, reason: expect.stringContaining("closed the stream before answering") });
  });
});

describe("ParkedCall notifications", () => {
  it("hands notifications to the waiting request as they arrive when it listens, and keeps them for the step otherwise", async () => {
    const s = script();
    const call = new ParkedCall(s.io, ALL, "up-6");
    const live: string[] = [];
    call.onInterim = (m) => live.push(String((m.params as JsonObject).progress));
    const step = call.next();
    s.send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: 1, progress: 1 } });
    await new Promise((r) => setTimeout(r, 20));
    expect(live).toEqual(["1"]); // before the step ended
    s.send(ask("q", "roots/list"));
    expect((await step).interim).toEqual([]);
    call.onInterim = undefined;
    s.send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: 1, progress: 2 } });
    await call.answer({ q: { roots: [] } }, ALL);
    const next = call.next();
    s.send({ jsonrpc: "2.0", id: "up-6", result: {} });
    expect((await next).interim.map((m) => (m.params as JsonObject).progress)).toEqual([2]);
  });
});

describe("ParkedCall failures", () => {
  it("names a session the upstream forgot (404), so the caller renews it and begins again", async () => {
    const gone: AsyncIterator<Frame> = {
      next: async () => {
        throw new UpstreamSessionGone("alpha", "session expired", 404, 404);
      },
    };
    const r = await new ParkedCall({ frames: gone, post: async () => undefined }, ALL, "up-4").next();
    expect(r).toMatchObject({ kind: "failed", sessionGone: true, uncertain: false });
    const lost: AsyncIterator<Frame> = {
      next: async () => {
        throw new UpstreamUncertain("alpha", "no answer within 1000 ms", 504);
      },
    };
    const u = await new ParkedCall({ frames: lost, post: async () => undefined }, ALL, "up-5").next();
    expect(u).toMatchObject({ kind: "failed", uncertain: true, reason: "no answer within 1000 ms" });
    expect("sessionGone" in u).toBe(false);
  });
});

describe("round tokens", () => {
  const binding: RoundBinding = { principal: "agent:a", upstream: "legacy", method: "tools/call", name: "ask", arguments: { x: 1 } };
  it("open only for the binding, the secret and the exact text they were made with", async () => {
    const id = newRoundId();
    const digest = await bindingDigest(binding);
    const token = roundToken("s3cret", id, 2, digest);
    expect(token).toMatch(/^pcr1\.[0-9a-f]{32}\.2\.[A-Za-z0-9_-]{43}$/);
    expect(openRoundToken("s3cret", token, digest)).toEqual({ id, n: 2 });
    const other = async (b: Partial<RoundBinding>) => openRoundToken("s3cret", token, await bindingDigest({ ...binding, ...b }));
    expect(await other({ principal: "agent:b" })).toBeNull();
    expect(await other({ name: "ask2" })).toBeNull();
    expect(await other({ arguments: { x: 2 } })).toBeNull();
    expect(await other({ upstream: "other" })).toBeNull();
    expect(openRoundToken("another secret", token, digest)).toBeNull();
    expect(openRoundToken("s3cret", token.replace(".2.", ".3."), digest)).toBeNull();
    expect(openRoundToken("s3cret", `${token.slice(0, -1)}${token.endsWith("A") ? "B" : "A"}`, digest)).toBeNull();
    expect(openRoundToken("s3cret", `${token}-TAMPERED`, digest)).toBeNull();
    expect(openRoundToken("s3cret", "pcr1.zz", digest)).toBeNull();
  });
});

// ---- governance across rounds -------------------------------------------------------------

const up = testUpstream();
const agent: Principal = { sub: "agent:a", team: "infra", roles: ["agent"], tools: ["alpha__*"], authenticated: true, jti: "j-1" };

function call(params: JsonObject = {}): ToolCall {
  return {
    principal: agent,
    era: "modern",
    request: { jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "alpha__ask", arguments: {}, ...params } },
    exposedName: "alpha__ask",
    arguments: {},
    runId: null,
  };
}

const irr = (n: number, key: string): LegResult => ({
  kind: "answered",
  response: {
    jsonrpc: "2.0",
    id: 9,
    result: { resultType: "input_required", inputRequests: { [key]: { method: "elicitation/create", params: {} } }, requestState: `pcr1.r${n}` },
  },
  status: 200,
  round: { id: "r", n, digest: "d", asks: { [key]: "elicitation/create" } },
});

/** Fakes whose leg answers from `legs` in turn, with a rounds port that keeps state in memory and checks tokens `pcr1.r<n>`. */
function roundFakes(legs: LegResult[], halts: { on: boolean } = { on: false }) {
  const events: string[] = [];
  const kept = new Map<number, RoundState>();
  let t = 1000;
  const rounds: CallRounds = {
    carries: (c) => String(c.request.params?.requestState ?? "").startsWith("pcr1."),
    continuation: async (c) => {
      const n = Number(/^pcr1\.r(\d+)$/.exec(String(c.request.params?.requestState))?.[1]);
      const state = kept.get(n);
      return state ? { ok: true, ref: { id: "r", n, digest: "d", asks: {} }, state } : { ok: false, reason: "is not one Portcullis issued for this call" };
    },
    park: async (ref: RoundRef, state: RoundState) => {
      events.push(`park:${ref.n}`);
      kept.set(ref.n, JSON.parse(JSON.stringify(state)) as RoundState);
    },
    cancel: async (ref: RoundRef, reason: string) => {
      events.push(`cancel:${ref.n}:${reason}`);
    },
  };
  const deps: GovernanceDeps = {
    catalog: {
      resolve: async (name) =>
        name === "alpha__ask" ? { upstream: up, tool: (await catalogEntry({ name: "ask", inputSchema: { type: "object" } }, "alpha__ask"))! } : null,
    },
    killSwitch: { read: async () => ({ version: 1, halts: halts.on ? [{ scope: "global" as const, reason: "stop" }] : [] }) },
    mappings: NO_MAPPINGS,
    policy: {
      ...OPEN_POLICY,
      version: "p1",
      usesHistory: true,
      decide: async () => {
        events.push("decide");
        return { decision: "allow", rule: "r1", reason: "ok", obligations: [], mode: "enforce", policyVersion: "p1" };
      },
    },
    holds: NO_HOLDS,
    ledger: {
      decision: async () => {
        events.push("decision");
        return { chain: "infra", seq: 1, hash: "h1", decision_id: "d1" };
      },
      outcome: async (r) => {
        events.push(`outcome:${r.status}:${r.decision?.decision_id}`);
        return { chain: "infra", seq: 9, hash: "h9", decision_id: "d1" };
      },
      round: async (r) => {
        events.push(`round:${r.round}:${Object.keys(r.asks).join(",")}:${r.answered.join(",")}`);
        return null;
      },
      blocked: async (_c, r) => {
        events.push(`blocked:${r.check}`);
        return "b1";
      },
    },
    upstream: {
      call: async () => {
        events.push("forward");
        return legs.shift()!;
      },
    },
    history: {
      ...NO_HISTORY,
      admit: async () => {
        events.push("admit");
        return { ok: true };
      },
      settle: async (_p, _id, status) => void events.push(`settle:${status}`),
    },
    clock: () => (t += 5),
    rounds,
  };
  return { deps, events };
}

describe("governance across input rounds", () => {
  it("decides and admits once, records each round, and settles one outcome under the first decision", async () => {
    const done: LegResult = { kind: "answered", response: { jsonrpc: "2.0", id: 9, result: { content: [{ type: "text", text: "ok" }] } }, status: 200 };
    const { deps, events } = roundFakes([irr(1, "name"), irr(2, "colour"), done]);
    const r1 = await governToolCall(deps, call());
    expect(r1.response.result?.resultType).toBe("input_required");
    const r2 = await governToolCall(deps, call({ inputResponses: { name: { action: "accept" } }, requestState: "pcr1.r1" }));
    expect(r2.response.result?.resultType).toBe("input_required");
    const r3 = await governToolCall(deps, call({ inputResponses: { colour: { action: "accept" } }, requestState: "pcr1.r2" }));
    expect(r3.response.result?.content).toEqual([{ type: "text", text: "ok" }]);
    expect(((r3.response.result?._meta ?? {}) as JsonObject)["portcullis/receipt"]).toMatchObject({ decision_id: "d1" });
    expect(events).toEqual([
      "decide",
      "admit",
      "decision",
      "forward",
      "round:1:name:",
      "park:1",
      "forward",
      "round:2:colour:name",
      "park:2",
      "forward",
      "outcome:succeeded:d1",
      "settle:succeeded",
    ]);
  });

  it("refuses a token that does not hold with -32602, on the record, and forwards nothing", async () => {
    const { deps, events } = roundFakes([]);
    const r = await governToolCall(deps, call({ inputResponses: {}, requestState: "pcr1.r5" }));
    expect(r.response.error?.code).toBe(-32602);
    expect(r.response.error?.message).toContain("requestState is not one Portcullis issued");
    expect(r.status).toBe(400);
    expect(events).toEqual(["blocked:round"]);
  });

  it("a halt between rounds cancels the parked call upstream and settles the call uncertain", async () => {
    const halts = { on: false };
    const { deps, events } = roundFakes([irr(1, "name")], halts);
    await governToolCall(deps, call());
    halts.on = true;
    const r = await governToolCall(deps, call({ inputResponses: { name: { action: "accept" } }, requestState: "pcr1.r1" }));
    expect(r.response.error ?? r.response.result?.isError).toBeTruthy();
    expect(events.slice(-3)).toEqual([expect.stringMatching(/^cancel:1:/), "outcome:uncertain:d1", "blocked:kill_switch"]);
    expect(events.filter((e) => e === "forward")).toHaveLength(1);
  });
});
