/**
 * Failures are told apart by their type or their data, never by their text: an upstream's
 * discover failure is a legacy verdict only when the upstream answered (UpstreamError.answered),
 * whatever its name or message says; observe and advise leave unapplied exactly the obligations
 * that failed (by identity), not every obligation whose spec a reason happens to quote; the
 * ledger writer skips the blocked record only for a refusal caused by its own timeout
 * (LedgerLate, the refusal's cause), not for one whose reason reads like it; a bounded wait
 * rejects with NoAnswer; a run read before the first flush is empty only when D1 really lacks the
 * table. Every message stays as it was.
 */
import { env } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { Env } from "../../src/env.ts";
import { decideCall, type GovernanceDeps } from "../../src/governance/call-decide.ts";
import { catalogEntry } from "../../src/governance/catalog-entry.ts";
import { type Decision, NO_HISTORY, NO_HOLDS, NO_LEDGER, NO_MAPPINGS, type Obligation, OPEN_POLICY, type ToolCall } from "../../src/governance/steps.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import { LEDGER_D1_SCHEMA, schemaStatements } from "../../durable-objects/ledger-schema.ts";
import { chainEntries, EMPTY_HEAD } from "../../src/ledger/chain.ts";
import type { EntryDraft } from "../../src/ledger/records.ts";
import { LedgerLate } from "../../src/ports/ledger-batch.ts";
import { callLedger, LEDGER_WRITE_TIMEOUT_MS } from "../../src/ports/ledger-writer.ts";
import { listRuns } from "../../src/services/run-records.ts";
import { callUpstream, modernDiscovery } from "../../src/upstream/client.ts";
import { UpstreamConnectionLost, UpstreamError } from "../../src/upstream/exchange.ts";
import { bounded, NoAnswer } from "../../src/wire/bounded.ts";
import type { JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testUpstream } from "./fixtures.ts";

afterEach(() => vi.restoreAllMocks());

describe("discover: a legacy verdict only for an upstream that answered", () => {
  let n = 0;
  const upstream = (name: string): UpstreamConfig =>
    testUpstream(name, `http://127.0.0.1:9031/typed-${n++}-${crypto.randomUUID()}`, { egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true } });
  const discovers = () => vi.mocked(globalThis.fetch).mock.calls.filter(([, init]) => String(init?.body ?? "").includes("server/discover")).length;

  it("an unreachable upstream whose name and failure both say HTTP gets no verdict: it throws, nothing is cached", async () => {
    vi.spyOn(globalThis, "fetch").mockImplementation(async () => {
      throw new TypeError("HTTP/1.1 connection reset by peer");
    });
    const up = upstream("HTTPbin");
    const first = await modernDiscovery(up).then(
      () => null,
      (e: unknown) => e,
    );
    expect(first).toBeInstanceOf(UpstreamConnectionLost);
    expect((first as UpstreamError).message).toBe("upstream HTTPbin: unreachable (HTTP/1.1 connection reset by peer)");
    expect((first as UpstreamError).answered).toBeUndefined();
    // No verdict was kept: the next request asks again.
    await expect(modernDiscovery(up)).rejects.toBeInstanceOf(UpstreamConnectionLost);
    expect(discovers()).toBe(2);
  });

  it("an upstream that answered discover with a 5xx and no message is legacy (cached), whatever its name", async () => {
    for (const [status, body] of [
      [502, ""],
      [504, "<html>gateway timeout</html>"],
    ] as const) {
      vi.restoreAllMocks();
      vi.spyOn(globalThis, "fetch").mockImplementation(async () => new Response(body, { status, headers: { "content-type": "text/html" } }));
      const up = upstream("plain");
      expect(await modernDiscovery(up)).toBeNull();
      expect(await modernDiscovery(up)).toBeNull();
      expect(discovers(), `HTTP ${status}`).toBe(1);
    }
  });

  it("the answered status is on the error where the failure is the upstream's answer", async () => {
    vi.spyOn(globalThis, "fetch").mockImplementation(async () => new Response("", { status: 503 }));
    const msg: JsonRpcRequest = { jsonrpc: "2.0", id: 1, method: "tools/list" };
    const e = await callUpstream(upstream("alpha"), { era: "modern", meta: {} }, msg).then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(UpstreamError);
    expect((e as UpstreamError).message).toBe("upstream alpha: answered HTTP 503 with an empty body");
    expect((e as UpstreamError).status).toBe(502);
    expect((e as UpstreamError).answered).toBe(503);
  });
});

describe("observe/advise: the obligations that failed are left unapplied, by identity", () => {
  const up = testUpstream();
  const agent: Principal = { sub: "agent:a", team: "infra", roles: ["agent"], tools: null, authenticated: true };
  const call = (): ToolCall => ({
    principal: agent,
    era: "legacy",
    request: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "alpha__read", arguments: {} } },
    exposedName: "alpha__read",
    arguments: {},
    runId: null,
  });
  const deps = (obligations: Obligation[], mode: Decision["mode"]): GovernanceDeps => ({
    catalog: { resolve: async (name) => ({ upstream: up, tool: (await catalogEntry({ name: "read", inputSchema: { type: "object" } }, name))! }) },
    killSwitch: NO_HALTS,
    mappings: NO_MAPPINGS,
    policy: {
      ...OPEN_POLICY,
      mode,
      decide: () => ({ decision: "allow", rule: "r1", reason: "ok", obligations, mode, policyVersion: "p1" }),
    },
    holds: NO_HOLDS,
    ledger: NO_LEDGER,
    history: NO_HISTORY,
    upstream: { call: async () => ({ kind: "failed", reason: "not used", auth: false }) },
    clock: () => 1000,
  });

  it("an obligation whose spec an unrelated reason quotes is still applied; the one that failed is not", async () => {
    // The unknown obligation's spec (and so its reason) quotes "mask:email" verbatim.
    const unknown: Obligation = { kind: "encrypt", arg: '"mask:email"', spec: 'encrypt:"mask:email"' };
    const mask: Obligation = { kind: "mask", arg: "email", spec: "mask:email" };
    for (const mode of ["observe", "advise"] as const) {
      const v = await decideCall(deps([unknown, mask], mode), call());
      expect(v.kind, mode).toBe("proceed");
      if (v.kind !== "proceed") continue;
      expect(v.decision.obligations, mode).toEqual([mask]);
      expect(v.decision.wouldBlock?.reason, mode).toBe(
        'obligation: the obligation "encrypt:"mask:email"" is of a kind this gateway does not know (it knows audit, redact, mask, filter, rate_limit); the call was not sent',
      );
    }
  });

  it("enforce still refuses on the first failed obligation, with its reason", async () => {
    const unknown: Obligation = { kind: "encrypt", arg: '"mask:email"', spec: 'encrypt:"mask:email"' };
    const v = await decideCall(deps([{ kind: "mask", arg: "email", spec: "mask:email" }, unknown], "enforce"), call());
    expect(v).toMatchObject({ kind: "refused", refusal: { check: "obligation" } });
    if (v.kind === "refused") expect(v.refusal.reason).toContain('the obligation "encrypt:"mask:email"" is of a kind this gateway does not know');
  });
});

describe("bounded waits reject with NoAnswer", () => {
  it("the class carries who and how long; the text is as before", async () => {
    const e = await bounded(new Promise(() => undefined), 20, "the kill switch").then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(NoAnswer);
    expect(e).toMatchObject({ kind: "no_answer", what: "the kill switch", ms: 20, message: "the kill switch did not answer within 20 ms" });
    await expect(bounded(Promise.reject(new Error("own")), 1000)).rejects.toThrow(/^own$/);
  });
});

describe("the ledger writer tells its own timeout by its type", () => {
  const agent: Principal = { sub: "agent:a", team: "team-a", roles: ["agent"], tools: null, authenticated: true };
  const toolCall: ToolCall = {
    principal: agent,
    era: "legacy",
    request: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "alpha__read" } },
    exposedName: "alpha__read",
    arguments: {},
    runId: null,
  };

  it("after a timeout, a refusal whose reason merely reads like it is recorded; one caused by the timeout is not attempted", async () => {
    let appends = 0;
    let head = EMPTY_HEAD;
    const api = {
      async appendEach(calls: EntryDraft[][]) {
        appends++;
        if (appends === 1) return new Promise<never>(() => undefined); // the first append hangs past the bound
        return calls.map((drafts) => {
          const entries = chainEntries("team-a", head, drafts);
          head = { seq: entries.at(-1)!.seq, hash: entries.at(-1)!.hash };
          return { entries };
        });
      },
    };
    const fake = { LEDGER: { idFromName: (n: string) => n, get: () => api } } as unknown as Env;
    const ledger = callLedger({ env: fake, principal: agent, signing: { secret: "S", gateway: "http://127.0.0.1" }, waitUntil: () => undefined });
    const late = await ledger.blocked(toolCall, { check: "grant", reason: "first" }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(late).toBeInstanceOf(LedgerLate);
    expect((late as Error).message).toBe(`the ledger did not answer within ${LEDGER_WRITE_TIMEOUT_MS} ms`);

    // The refusal this timeout caused is answered at once, without an append (within one write bound).
    await expect(
      ledger.blocked(toolCall, { check: "ledger", reason: "the ledger step could not answer (…)", cause: new LedgerLate(LEDGER_WRITE_TIMEOUT_MS) }),
    ).rejects.toThrow(`the ledger did not answer within ${LEDGER_WRITE_TIMEOUT_MS} ms a moment ago; the blocked record was not attempted`);
    expect(appends).toBe(1);

    // Same words, another cause (here none): the record is written.
    const lookalike = `the ledger step could not answer (the ledger did not answer within ${LEDGER_WRITE_TIMEOUT_MS} ms); the call was refused to fail closed`;
    expect(await ledger.blocked(toolCall, { check: "policy", reason: lookalike })).toEqual(expect.any(String));
    expect(appends).toBe(2);
  }, 15_000);
});

describe("runs before the first flush: empty only when D1 lacks the table", () => {
  const admin: Principal = { sub: "human:ops", team: "team-a", roles: ["admin"], tools: null, authenticated: true };
  const fakeEnv = (db: unknown) =>
    ({
      LEDGER: { idFromName: (n: string) => n, get: () => ({ status: async () => ({ flushedSeq: 0 }), read: async () => [] }) },
      LEDGER_DB: db,
    }) as unknown as Env;
  /** A D1 whose run query fails with `message`; sqlite_master answers from `real` (or says there is no table). */
  const failingDb = (message: string, real?: D1Database) => ({
    prepare(sql: string) {
      if (sql.includes("sqlite_master")) return real ? real.prepare(sql) : { first: async () => null };
      return {
        bind: () => ({
          all: async () => {
            throw new Error(message);
          },
        }),
      };
    },
  });

  it("a failure whose text says no such table, while the table exists, is a failure (503 with D1's words)", async () => {
    for (const s of schemaStatements(LEDGER_D1_SCHEMA)) await env.LEDGER_DB.prepare(s).run();
    const r = await listRuns(fakeEnv(failingDb("D1_ERROR: no such table: ledger_entries", env.LEDGER_DB)), admin, {});
    expect(r).toEqual({ ok: false, status: 503, message: "the ledger could not be read (D1_ERROR: no such table: ledger_entries)" });
  });

  it("with no table yet, the run query's failure means nothing is flushed: the tail alone answers", async () => {
    expect(await listRuns(fakeEnv(failingDb("D1_ERROR: no such table: ledger_entries")), admin, {})).toEqual({ ok: true, value: [] });
  });
});
