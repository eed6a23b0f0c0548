/**
 * Input rounds on the production build: 2026-07-28 clients in front of a 2025-11-25-only upstream
 * (the conformance fixture in legacy-only mode, which asks its questions as server→client
 * requests on the call's POST stream). An SDK v2 client pinned to 2026-07-28 completes a tool
 * that elicits twice and samples once in three rounds, and governance saw one call: one
 * decision, three `call.round` records under it, one outcome, the upstream one tools/call. A
 * tampered, a foreign (another principal's), another call's and a spent requestState are each
 * refused with a JSON-RPC error while the upstream sees nothing; a round left unanswered past the
 * upstream's timeout is cancelled upstream (notifications/cancelled) and recorded `uncertain`; one
 * principal's concurrent rounds each get their own answer. Owns the fixture and gateway it
 * starts; all on loopback.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { type ConformanceUpstream, startConformanceUpstream } from "../fixtures/conformance-upstream/server.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { grantFor, ledgerKinds, modernRaw, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const TEAM = "team-rounds";
const TIMEOUT_MS = 4000;
/** Every JSON-RPC message the upstream received, in order. */
const seen: Any[] = [];
let upstream: ConformanceUpstream;
let gw: Proc & { url: string; logs: () => string };
let origin = "";
const grants = { a: "", b: "", auditor: "" };
const ALL_CAPS = { elicitation: {}, sampling: {}, roots: {} };

beforeAll(async () => {
  upstream = await startConformanceUpstream({ legacyOnly: true, onMessage: (m) => seen.push(m) });
  const jwk = JSON.stringify((await generateSigningKey("rounds-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  gw = await startPortcullis(
    `
actor: local:rounds
auth:
  required: true
egress:
  allow_loopback: true
upstreams:
  - name: legacy
    url: ${upstream.url}
    timeout: ${TIMEOUT_MS}ms
`,
    port,
    { PORTCULLIS_SIGNING_KEY: jwk },
  );
  const grant = async (sub: string, roles: string[], tools: string[] = []) =>
    (await grantFor(jwk, origin, { sub, team: TEAM, roles: roles as never, tools, ttlSeconds: 3600 })).token;
  grants.a = await grant("agent:rounds-a", ["agent"], ["*"]);
  grants.b = await grant("agent:rounds-b", ["agent"], ["*"]);
  grants.auditor = await grant("human:rounds-auditor", ["auditor"]);
}, 240_000);

afterAll(async () => {
  await Promise.allSettled([gw?.stop(), upstream?.close()]);
});

/** One 2026-07-28 tools/call with all three input capabilities declared; extra params (inputResponses, requestState) as given. */
const call = (bearer: string, name: string, extra: Record<string, unknown> = {}) =>
  modernRaw(gw.url, bearer, "tools/call", { name, arguments: {}, ...extra }, { meta: { "io.modelcontextprotocol/clientCapabilities": ALL_CAPS } });

/** What the upstream received since `from` (an index into `seen`). */
const since = (from: number) => seen.slice(from);
const callsOf = (msgs: Any[], tool: string) => msgs.filter((m) => m.method === "tools/call" && m.params?.name === tool);

describe("input rounds of a 2025-11-25 upstream for 2026-07-28 clients", () => {
  it("an SDK v2 client completes a tool that elicits twice and samples once in three rounds; governance sees one call", async () => {
    const client = new Client({ name: "rounds-e2e", version: "1" }, { versionNegotiation: { mode: { pin: "2026-07-28" } }, capabilities: ALL_CAPS });
    const asked: string[] = [];
    client.setRequestHandler("elicitation/create", async (req) => {
      asked.push(`elicitation:${String(req.params.message)}`);
      const field = Object.keys((req.params as Any).requestedSchema?.properties ?? {})[0] ?? "value";
      return { action: "accept", content: { [field]: field === "name" ? "Ada" : "teal" } };
    });
    client.setRequestHandler("sampling/createMessage", async (req) => {
      asked.push(`sampling:${JSON.stringify(req.params.messages[0]?.content)}`);
      return { model: "e2e", role: "assistant", content: { type: "text", text: "a teal line for Ada" } };
    });
    const transport = new StreamableHTTPClientTransport(new URL(gw.url), { requestInit: { headers: { authorization: `Bearer ${grants.a}` } } });
    await client.connect(transport);
    const from = seen.length;
    try {
      expect(client.getProtocolEra()).toBe("modern");
      const r = await client.callTool({ name: "test_three_rounds", arguments: {} });
      expect(texts(r)).toBe("name=Ada colour=teal line=a teal line for Ada");
      expect(asked).toHaveLength(3);
      expect(asked[2]).toContain("Ada and teal");
      const receipt = (r as Any)._meta?.["portcullis/receipt"];
      expect(receipt?.decision_id).toMatch(/^[0-9a-f-]{36}$/);
      // The upstream saw one call, and the three answers as responses to its own requests.
      const got = since(from);
      expect(callsOf(got, "test_three_rounds")).toHaveLength(1);
      expect(got.filter((m) => m.method === undefined && m.result !== undefined).map((m) => m.id)).toEqual(["name", "colour", "line"]);
      // The ledger: one decision, three rounds under it, one outcome.
      const id = receipt.decision_id;
      const decisions = await ledgerKinds(origin, grants.auditor, "decision", (es) => es.some((e) => e.id === id));
      expect(decisions.filter((e) => e.body.tool === "test_three_rounds" && e.body.principal === "agent:rounds-a")).toHaveLength(1);
      const rounds = (await ledgerKinds(origin, grants.auditor, "call.round", (es) => es.filter((e) => e.body.decision_id === id).length >= 3))
        .filter((e) => e.body.decision_id === id)
        .sort((x, y) => x.body.round - y.body.round);
      expect(rounds.map((e) => [e.body.round, e.body.asks])).toEqual([
        [1, { name: "elicitation/create" }],
        [2, { colour: "elicitation/create" }],
        [3, { line: "sampling/createMessage" }],
      ]);
      expect(rounds.map((e) => e.body.answered)).toEqual([[], ["name"], ["colour"]]);
      const outcomes = (await ledgerKinds(origin, grants.auditor, "outcome", (es) => es.some((e) => e.body.decision_id === id))).filter(
        (e) => e.body.decision_id === id,
      );
      expect(outcomes.map((e) => e.body.status)).toEqual(["succeeded"]);
    } finally {
      await client.close().catch(() => undefined);
    }
  }, 60_000);

  it("refuses a tampered, a foreign, another call's and a spent requestState, the upstream untouched", async () => {
    const first = await call(grants.a, "test_input_required_result_elicitation");
    expect(first.answer.result.resultType).toBe("input_required");
    expect(Object.keys(first.answer.result.inputRequests)).toEqual(["user_name"]);
    const state: string = first.answer.result.requestState;
    expect(state).toMatch(/^pcr1\./);
    const answer = { user_name: { action: "accept", content: { name: "Ada" } } };
    const from = seen.length;
    const refusals = [
      await call(grants.a, "test_input_required_result_elicitation", { inputResponses: answer, requestState: `${state.slice(0, -2)}xx` }),
      await call(grants.b, "test_input_required_result_elicitation", { inputResponses: answer, requestState: state }),
      await call(grants.a, "test_input_required_result_sampling", { inputResponses: answer, requestState: state }),
    ];
    for (const r of refusals) {
      expect(r.answer.error?.code).toBe(-32602);
      expect(r.answer.error?.message).toMatch(/requestState/);
    }
    expect(since(from)).toEqual([]); // nothing reached the upstream
    const done = await call(grants.a, "test_input_required_result_elicitation", { inputResponses: answer, requestState: state });
    expect(texts(done.answer.result)).toContain("Hello, Ada!");
    const afterDone = seen.length;
    const spent = await call(grants.a, "test_input_required_result_elicitation", { inputResponses: answer, requestState: state });
    expect(spent.answer.error?.code).toBe(-32602);
    expect(since(afterDone)).toEqual([]);
    const blocked = await ledgerKinds(origin, grants.auditor, "blocked", (es) => es.filter((e) => e.body.check === "round").length >= 4);
    expect(blocked.filter((e) => e.body.check === "round").map((e) => e.body.principal)).toEqual(expect.arrayContaining(["agent:rounds-a", "agent:rounds-b"]));
  }, 60_000);

  it("cancels a round left unanswered past the upstream's timeout, upstream and on the record", async () => {
    const from = seen.length;
    const first = await call(grants.a, "test_input_required_result_list_roots");
    expect(first.answer.result.resultType).toBe("input_required");
    const id = first.answer.result._meta["portcullis/receipt"].decision_id;
    const upCall = callsOf(since(from), "test_input_required_result_list_roots")[0];
    expect(upCall).toBeDefined();
    let cancelled: Any;
    for (let i = 0; i < 40 && !cancelled; i++) {
      await new Promise((r) => setTimeout(r, 250));
      cancelled = since(from).find((m) => m.method === "notifications/cancelled" && m.params?.requestId === upCall.id);
    }
    expect(cancelled?.params.reason).toMatch(/did not complete input round 1/);
    const outcomes = (await ledgerKinds(origin, grants.auditor, "outcome", (es) => es.some((e) => e.body.decision_id === id))).filter(
      (e) => e.body.decision_id === id,
    );
    expect(outcomes).toHaveLength(1);
    expect(outcomes[0].body.status).toBe("uncertain");
    expect(outcomes[0].body.reason).toMatch(/did not complete input round 1/);
    const late = await call(grants.a, "test_input_required_result_list_roots", {
      inputResponses: { client_roots: { roots: [] } },
      requestState: first.answer.result.requestState,
    });
    expect(late.answer.error?.code).toBe(-32602);
  }, 60_000);

  it("keeps one principal's concurrent rounds apart: each continues only its own call", async () => {
    const [e, s] = await Promise.all([call(grants.b, "test_input_required_result_elicitation"), call(grants.b, "test_input_required_result_sampling")]);
    const eState = e.answer.result.requestState;
    const sState = s.answer.result.requestState;
    expect(eState).not.toBe(sState);
    const sKey = Object.keys(s.answer.result.inputRequests)[0]!;
    const [eDone, sDone] = await Promise.all([
      call(grants.b, "test_input_required_result_elicitation", {
        inputResponses: { user_name: { action: "accept", content: { name: "Bea" } } },
        requestState: eState,
      }),
      call(grants.b, "test_input_required_result_sampling", {
        inputResponses: { [sKey]: { role: "assistant", model: "m", content: { type: "text", text: "Paris, said Bea" } } },
        requestState: sState,
      }),
    ]);
    expect(texts(eDone.answer.result)).toContain("Hello, Bea!");
    expect(texts(sDone.answer.result)).toContain("Paris, said Bea");
    expect(texts(sDone.answer.result)).not.toContain("Hello");
  }, 60_000);
});
