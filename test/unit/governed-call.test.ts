/**
 * The governed tools/call (src/governance/call.ts) with injected fakes: every collaborator
 * records what it saw, and a recording upstream leg counts what reached it. Shows the step
 * order (write-ahead before forward, outcome before answer), the three leg results, an
 * upstream auth error, fail-closed refusals (a step that throws refuses the call and the
 * upstream sees nothing), and the client's `portcullis/` `_meta` keys dropped before forwarding
 * (named, never valued, in the decision record; the gateway's own keys added after).
 */
import { describe, expect, it } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { governedPassThrough, governToolCall } from "../../src/governance/call.ts";
import type { GovernanceDeps } from "../../src/governance/call-decide.ts";
import { RECEIPT_META } from "../../src/governance/call-answers.ts";
import { type CatalogTool, catalogEntry, schemaHash } from "../../src/governance/catalog-entry.ts";
import {
  CatalogUnreadable,
  type Decision,
  type DecisionRecord,
  type LegResult,
  NO_HOLDS,
  NO_HISTORY,
  NO_LEDGER,
  NO_MAPPINGS,
  OPEN_POLICY,
  type ToolCall,
} from "../../src/governance/steps.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import type { JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import type { Mappings } from "../../src/governance/steps.ts";
import type { ToolMapping } from "../../src/config/mapping-schema.ts";

const up: UpstreamConfig = {
  name: "alpha",
  url: "http://127.0.0.1:9/mcp",
  namespaced: true,
  headers: {},
  allow: [],
  deny: ["secret_*"],
  timeoutMs: 1000,
  credentials: { mode: "none", header: "Authorization", prefix: "Bearer " },
  egress: DEFAULT_EGRESS_RULES,
  onLoopback: true,
};
const agent: Principal = { sub: "agent:a", team: "infra", roles: ["agent"], tools: ["alpha__*"], authenticated: true, jti: "j-1" };

async function tool(name: string): Promise<CatalogTool> {
  return (await catalogEntry({ name, inputSchema: { type: "object", properties: { x: { type: "number" } } } }, `alpha__${name}`))!;
}

function call(exposedName: string, args: JsonObject = { x: 1 }, principal = agent): ToolCall {
  const request: JsonRpcRequest = {
    jsonrpc: "2.0",
    id: 7,
    method: "tools/call",
    params: { name: exposedName, arguments: args, _meta: { progressToken: "p1" } },
  };
  return { principal, era: "legacy", request, exposedName, arguments: args, runId: "run-1" };
}

/** Fakes that log every step they are asked to take, in order. */
function fakes(leg: LegResult | (() => Promise<LegResult>), over: Partial<GovernanceDeps> = {}) {
  const events: string[] = [];
  const seen: JsonRpcRequest[] = [];
  let t = 1000;
  const deps: GovernanceDeps = {
    catalog: { resolve: async (name) => (name.startsWith("alpha__") ? { upstream: up, tool: await tool(name.slice(7)) } : null) },
    killSwitch: {
      read: async () => {
        events.push("kill_switch");
        return { version: 1, halts: [] };
      },
    },
    mappings: NO_MAPPINGS,
    policy: {
      ...OPEN_POLICY,
      version: "p1",
      decide: async () => {
        events.push("decide");
        return { decision: "allow", rule: "r1", reason: "ok", obligations: [], mode: "enforce", policyVersion: "p1" };
      },
    },
    holds: NO_HOLDS,
    ledger: {
      decision: async () => {
        events.push("write_ahead");
        return { chain: "infra", seq: 1, hash: "h1", decision_id: "d1" };
      },
      outcome: async (r) => {
        events.push(`outcome:${r.status}`);
        return { chain: "infra", seq: 2, hash: "h2", decision_id: "d1" };
      },
      blocked: async (_c, r) => {
        events.push(`blocked:${r.check}`);
        return `blocked-${events.length}`;
      },
    },
    upstream: {
      call: async (_target, request) => {
        events.push("forward");
        seen.push(request);
        return typeof leg === "function" ? leg() : leg;
      },
    },
    history: NO_HISTORY,
    clock: () => (t += 5),
    ...over,
  };
  return { deps, events, seen };
}

const answered = (result: JsonObject): LegResult => ({ kind: "answered", response: { jsonrpc: "2.0", id: 7, result }, status: 200 });
const text = (r: { response: { result?: JsonObject } }) => ((r.response.result?.content as JsonObject[] | undefined)?.[0]?.text as string | undefined) ?? "";

describe("governToolCall", () => {
  it("answered: runs every step in request-path order and returns the upstream's result with the receipt", async () => {
    const f = fakes(answered({ content: [{ type: "text", text: "hi" }], structuredContent: { n: 1 }, extra: "kept" }));
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.events).toEqual(["kill_switch", "decide", "write_ahead", "forward", "outcome:succeeded"]);
    expect(f.seen).toHaveLength(1);
    // The upstream gets its own tool name; everything else of the client's request is unchanged.
    expect(f.seen[0]!.params).toEqual({ name: "do_it", arguments: { x: 1 }, _meta: { progressToken: "p1" } });
    expect(f.seen[0]!.id).toBe(7);
    expect(a.status).toBe(200);
    expect(a.response.result).toMatchObject({ content: [{ type: "text", text: "hi" }], structuredContent: { n: 1 }, extra: "kept" });
    expect((a.response.result!._meta as JsonObject)[RECEIPT_META]).toEqual({ chain: "infra", seq: 2, hash: "h2", decision_id: "d1" });
  });

  it("an upstream isError result is passed through unchanged and recorded as failed", async () => {
    const f = fakes(answered({ content: [{ type: "text", text: "boom" }], isError: true }));
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.events.at(-1)).toBe("outcome:failed");
    expect(a.response.result?.isError).toBe(true);
    expect(text(a)).toBe("boom");
  });

  it("without a ledger there is no receipt and the result is exactly the upstream's", async () => {
    const f = fakes(answered({ content: [], z: 1 }), { ledger: NO_LEDGER });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(a.response).toEqual({ jsonrpc: "2.0", id: 7, result: { content: [], z: 1 } });
  });

  it("failed: a JSON-RPC error naming the reason; the outcome is recorded as failed", async () => {
    const f = fakes({ kind: "failed", reason: "upstream alpha: unreachable (connection refused)", auth: false });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.events).toEqual(["kill_switch", "decide", "write_ahead", "forward", "outcome:failed"]);
    expect(a.response.error?.code).toBe(-32603);
    expect(a.response.error?.message).toContain("unreachable");
  });

  it("uncertain: the answer says the call may have run; the outcome is recorded as uncertain", async () => {
    const f = fakes({ kind: "uncertain", reason: "upstream alpha: no answer within 1000 ms" });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.events.at(-1)).toBe("outcome:uncertain");
    expect(a.response.error?.message).toMatch(/no answer within 1000 ms; the call may or may not have run upstream/);
  });

  it("an upstream auth error becomes a readable isError result on the governed path", async () => {
    const f = fakes({ kind: "failed", reason: "upstream alpha: refused the gateway's brokered credential (HTTP 401)", auth: true });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(a.response.error).toBeUndefined();
    expect(a.response.result?.isError).toBe(true);
    expect(text(a)).toContain("HTTP 401");
  });

  it("a call outside the grant is refused before routing, the same way whether or not the tool exists", async () => {
    const narrow: Principal = { ...agent, tools: ["alpha__read_*"] };
    const f = fakes(answered({ content: [] }));
    const real = await governToolCall(f.deps, call("alpha__do_it", {}, narrow));
    const ghost = await governToolCall(f.deps, call("alpha__no_such_tool", {}, narrow));
    expect(f.seen).toHaveLength(0);
    // The same refusal, but for the name and the id of its record.
    const same = (a: typeof real) => text(a).replace(/decision: [^,)]+/, "decision: <id>");
    expect(same(real)).toBe(same(ghost).replace("alpha__no_such_tool", "alpha__do_it"));
    expect(real.response.result?.isError).toBe(true);
    expect(f.events).toEqual(["blocked:grant", "blocked:grant"]);
  });

  it("unknown tools, tools the upstream denies and portcullis.* names are unknown (-32602), never forwarded", async () => {
    const f = fakes(answered({ content: [] }));
    for (const name of ["alpha__secret_key", "beta__x", "portcullis.whoami"]) {
      const a = await governToolCall(f.deps, call(name, {}, { ...agent, tools: null }));
      expect(a.response.error?.code, name).toBe(-32602);
    }
    expect(f.seen).toHaveLength(0);
  });

  it("a halt covering the call refuses it; the upstream sees nothing", async () => {
    for (const halt of [
      { scope: "global" as const },
      { scope: "team" as const, target: "infra" },
      { scope: "tool" as const, target: "alpha__do_it" },
      { scope: "grant" as const, target: "j-1" },
    ]) {
      const f = fakes(answered({ content: [] }), { killSwitch: { read: async () => ({ version: 2, halts: [{ ...halt, reason: "incident 42" }] }) } });
      const a = await governToolCall(f.deps, call("alpha__do_it"));
      expect(text(a), halt.scope).toContain("incident 42");
      expect(f.seen, halt.scope).toHaveLength(0);
      expect(f.events).toEqual(["blocked:kill_switch"]);
    }
    const other = fakes(answered({ content: [] }), {
      killSwitch: { read: async () => ({ version: 2, halts: [{ scope: "upstream", target: "beta", reason: "x" }] }) },
    });
    await governToolCall(other.deps, call("alpha__do_it"));
    expect(other.seen).toHaveLength(1);
  });

  it("policy: deny in enforce mode refuses; deny in observe mode forwards; require_approval without holds refuses", async () => {
    const decide = (d: Partial<Decision>) => ({
      ...OPEN_POLICY,
      version: "p",
      decide: async (): Promise<Decision> => ({ decision: "allow", rule: "r", reason: "because", obligations: [], mode: "enforce", policyVersion: "p", ...d }),
    });
    const deny = fakes(answered({ content: [] }), { policy: decide({ decision: "deny", reason: "no writes on Fridays" }) });
    expect(text(await governToolCall(deny.deps, call("alpha__do_it")))).toContain("no writes on Fridays");
    expect(deny.seen).toHaveLength(0);
    // observe: the policy answers allow with what enforce would have done (policy.ts adjusts to the mode).
    const observe = fakes(answered({ content: [] }), {
      policy: decide({ decision: "allow", mode: "observe", wouldBlock: { rule: "r", reason: "no writes on Fridays", decision: "deny" } }),
    });
    await governToolCall(observe.deps, call("alpha__do_it"));
    expect(observe.seen).toHaveLength(1);
    const approval = fakes(answered({ content: [] }), { policy: decide({ decision: "require_approval" }), holds: NO_HOLDS });
    expect(text(await governToolCall(approval.deps, call("alpha__do_it")))).toContain("needs approval");
    expect(approval.seen).toHaveLength(0);
  });

  const withObligations = (specs: string[], mode: "enforce" | "observe" = "enforce") => ({
    ...OPEN_POLICY,
    version: "p",
    mode,
    decide: async (): Promise<Decision> => ({
      decision: "allow",
      rule: "r",
      reason: "ok",
      obligations: specs.map((spec) => ({ kind: spec.split(":")[0]!, arg: spec.slice(spec.indexOf(":") + 1), spec })),
      mode,
      policyVersion: "p",
    }),
  });

  it("an obligation the gateway does not know blocks the call before dispatch in enforce; observe forwards without applying it", async () => {
    const f = fakes(answered({ content: [{ type: "text", text: "secret rows" }] }), { policy: withObligations(["unheard_of:$.ssn"]) });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.seen).toHaveLength(0);
    expect(f.events.at(-1)).toBe("blocked:obligation");
    expect(text(a)).toContain("unheard_of:$.ssn");
    const o = fakes(answered({ content: [{ type: "text", text: "rows" }] }), { policy: withObligations(["unheard_of:$.ssn"], "observe") });
    const b = await governToolCall(o.deps, call("alpha__do_it"));
    expect(o.seen).toHaveLength(1);
    expect(text(b)).toBe("rows");
  });

  it("a result that cannot carry its obligation is held back (the call ran; the outcome says so)", async () => {
    const f = fakes(answered({ content: [{ type: "text", text: "ssn 123-45-6789 in free text" }] }), { policy: withObligations(["mask:ssn"]) });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.seen).toHaveLength(1);
    expect(f.events.at(-1)).toBe("outcome:failed");
    expect(a.response.result?.isError).toBe(true);
    expect(JSON.stringify(a)).not.toContain("123-45-6789");
  });

  it("a mask applies to a JSON result, and shaping obligations are pushed down in _meta", async () => {
    const f = fakes(answered({ content: [{ type: "text", text: JSON.stringify({ name: "ada", ssn: "123-45-6789" }) }] }), {
      policy: withObligations(["mask:ssn"]),
    });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(JSON.stringify(a)).not.toContain("123-45-6789");
    expect(JSON.parse(text(a))).toEqual({ name: "ada", ssn: "****" });
    expect((f.seen[0]!.params!._meta as JsonObject)["portcullis/obligations"]).toEqual(["mask:ssn"]);
  });

  it("the client's portcullis/ _meta keys never reach the upstream; other keys go verbatim; the decision names what was dropped; the gateway's keys are added after", async () => {
    const records: DecisionRecord[] = [];
    const f = fakes(answered({ content: [{ type: "text", text: "ok" }] }), { policy: withObligations(["mask:ssn"]) });
    f.deps.ledger = {
      ...f.deps.ledger,
      decision: async (r) => {
        records.push(r);
        return { chain: "infra", seq: 1, hash: "h1", decision_id: "d1" };
      },
    };
    const c = call("alpha__do_it");
    const meta = {
      progressToken: "p1",
      "vendor/trace": { id: "t-1" },
      "portcullis/idempotency_key": "AGENT-COMPUTED-KEY",
      "portcullis/obligations": [],
      "portcullis/receipt": { seq: 1 },
    };
    c.request = { ...c.request, params: { ...c.request.params, _meta: meta } };
    await governToolCall(f.deps, c);
    expect(f.seen).toHaveLength(1);
    // Only the gateway's own key under portcullis/ (its obligations push-down), every other key as sent.
    expect(f.seen[0]!.params!._meta).toEqual({ progressToken: "p1", "vendor/trace": { id: "t-1" }, "portcullis/obligations": ["mask:ssn"] });
    expect(JSON.stringify(f.seen)).not.toContain("AGENT-COMPUTED-KEY");
    expect(records.map((r) => r.strippedMeta)).toEqual([["portcullis/idempotency_key", "portcullis/obligations", "portcullis/receipt"]]);
    expect(JSON.stringify(records)).not.toContain("AGENT-COMPUTED-KEY");

    // Without an obligation, a client's portcullis/obligations does not pass as the gateway's; without any, nothing is named.
    const g = fakes(answered({ content: [{ type: "text", text: "ok" }] }));
    const gRecords: DecisionRecord[] = [];
    g.deps.ledger = {
      ...g.deps.ledger,
      decision: async (r) => {
        gRecords.push(r);
        return { chain: "infra", seq: 1, hash: "h1", decision_id: "d1" };
      },
    };
    await governToolCall(g.deps, c);
    await governToolCall(g.deps, call("alpha__do_it"));
    expect(g.seen.map((r) => r.params!._meta)).toEqual([{ progressToken: "p1", "vendor/trace": { id: "t-1" } }, { progressToken: "p1" }]);
    expect(gRecords.map((r) => r.strippedMeta)).toEqual([["portcullis/idempotency_key", "portcullis/obligations", "portcullis/receipt"], undefined]);
  });

  describe("per-tool timeout and retry (mapping)", () => {
    const mapped = (m: Partial<ToolMapping>): Mappings => ({
      loaded: true,
      get: () => ({ effect: "read_only", approval: "none", arguments: "hashed", ...m }) as ToolMapping,
    });
    const flaky = (failures: number, kind: "failed" | "uncertain" = "uncertain") => {
      let n = 0;
      return async (): Promise<LegResult> =>
        ++n <= failures
          ? kind === "failed"
            ? { kind, reason: "down", auth: false }
            : { kind, reason: "timed out" }
          : answered({ content: [{ type: "text", text: "ok" }] });
    };

    it("a read_only tool is retried with backoff until it answers, at most `attempts` more times", async () => {
      const f = fakes(flaky(2), { mappings: mapped({ effect: "read_only", retry: { attempts: 3, backoffMs: 1 } }) });
      expect(text(await governToolCall(f.deps, call("alpha__do_it")))).toBe("ok");
      expect(f.seen).toHaveLength(3);
      const g = fakes(flaky(5), { mappings: mapped({ effect: "idempotent", retry: { attempts: 2, backoffMs: 1 } }) });
      const a = await governToolCall(g.deps, call("alpha__do_it"));
      expect(g.seen).toHaveLength(3);
      expect(a.response.error?.message).toContain("may or may not have run");
      expect(g.events.at(-1)).toBe("outcome:uncertain");
    });

    it("a tool of another effect is never retried (the schema refuses retry there; the path does not rely on it)", async () => {
      const f = fakes(flaky(1, "failed"), { mappings: mapped({ effect: "irreversible", retry: { attempts: 3, backoffMs: 1 } }) });
      await governToolCall(f.deps, call("alpha__do_it"));
      expect(f.seen).toHaveLength(1);
    });

    describe("one retry after a lost connection (no mapping retry needed)", () => {
      const lost: LegResult = { kind: "failed", reason: "upstream alpha: unreachable (Network connection lost.)", auth: false, connection: true };
      /** A leg that fails the first `failures` attempts with `fail`, then answers "ok". */
      const seq = (failures: number, fail: LegResult = lost) => {
        let n = 0;
        return async (): Promise<LegResult> => (++n <= failures ? fail : answered({ content: [{ type: "text", text: "ok" }] }));
      };
      /** The fakes, with every outcome record's status and reason kept. */
      const recording = (leg: () => Promise<LegResult>, m: Partial<ToolMapping>) => {
        const outcomes: { status: string; reason: string | undefined }[] = [];
        const f = fakes(leg, { mappings: mapped(m) });
        const outcome = f.deps.ledger.outcome;
        f.deps.ledger = {
          ...f.deps.ledger,
          outcome: async (r) => {
            outcomes.push({ status: r.status, reason: r.reason });
            return outcome(r);
          },
        };
        return { ...f, outcomes };
      };

      it("a read_only or idempotent tool is sent once more at once; the agent gets the answer and the outcome says it was retried", async () => {
        for (const effect of ["read_only", "idempotent"] as const) {
          const f = recording(seq(1), { effect });
          const a = await governToolCall(f.deps, call("alpha__do_it"));
          expect(text(a), effect).toBe("ok");
          expect(f.seen, effect).toHaveLength(2);
          expect(f.events, effect).toEqual(["kill_switch", "decide", "write_ahead", "forward", "forward", "outcome:succeeded"]);
          expect(f.outcomes).toEqual([
            {
              status: "succeeded",
              reason: "answered after one retry: the first attempt's connection was lost (upstream alpha: unreachable (Network connection lost.))",
            },
          ]);
        }
      });

      it("a write (reversible) or irreversible tool is never retried: one call, a failed answer naming the upstream", async () => {
        for (const effect of ["reversible", "irreversible"] as const) {
          const f = recording(seq(1), { effect });
          const a = await governToolCall(f.deps, call("alpha__do_it"));
          expect(f.seen, effect).toHaveLength(1);
          expect(a.response.error?.code, effect).toBe(-32603);
          expect(a.response.error?.message, effect).toContain("upstream alpha: unreachable");
          expect(f.outcomes, effect).toEqual([{ status: "failed", reason: "upstream alpha: unreachable (Network connection lost.)" }]);
        }
      });

      it("the classification decides, mapped or not: an unmapped read (heuristic) is retried, the conservative default never", async () => {
        const f = fakes(seq(1));
        const a = await governToolCall(f.deps, call("alpha__do_it"));
        expect(f.seen).toHaveLength(1);
        expect(a.response.error?.message).toContain("unreachable");
        const g = fakes(seq(1));
        expect(text(await governToolCall(g.deps, call("alpha__get_report")))).toBe("ok");
        expect(g.seen).toHaveLength(2);
      });

      it("a failure that is not a lost connection (an HTTP 500) is not retried", async () => {
        const f = recording(seq(1, { kind: "failed", reason: "upstream alpha: refused a message (HTTP 500)", auth: false }), { effect: "read_only" });
        const a = await governToolCall(f.deps, call("alpha__do_it"));
        expect(f.seen).toHaveLength(1);
        expect(a.response.error?.message).toContain("HTTP 500");
        expect(f.outcomes).toEqual([{ status: "failed", reason: "upstream alpha: refused a message (HTTP 500)" }]);
      });

      it("an uncertain leg (the request may have run) is not retried", async () => {
        const f = recording(seq(1, { kind: "uncertain", reason: "upstream alpha: the connection was lost while the answer was read" }), {
          effect: "read_only",
        });
        await governToolCall(f.deps, call("alpha__do_it"));
        expect(f.seen).toHaveLength(1);
        expect(f.outcomes[0]!.status).toBe("uncertain");
      });

      it("lost twice: the call fails after exactly two attempts, and the outcome says the second was a retry", async () => {
        const f = recording(seq(5), { effect: "read_only" });
        const a = await governToolCall(f.deps, call("alpha__do_it"));
        expect(f.seen).toHaveLength(2);
        expect(a.response.error?.message).toContain("unreachable (Network connection lost.)");
        expect(f.events.filter((e) => e === "write_ahead")).toHaveLength(1);
        expect(f.outcomes).toHaveLength(1);
        expect(f.outcomes[0]!.status).toBe("failed");
        expect(f.outcomes[0]!.reason).toMatch(
          /^upstream alpha: unreachable \(Network connection lost\.\) \(after one retry: the first attempt's connection was lost/,
        );
      });

      it("a mapping retry keeps its behaviour exactly: attempts 2 and the connection lost every time is 3 calls, no extra one", async () => {
        const f = recording(seq(10), { effect: "read_only", retry: { attempts: 2, backoffMs: 1 } });
        await governToolCall(f.deps, call("alpha__do_it"));
        expect(f.seen).toHaveLength(3);
        expect(f.outcomes).toEqual([{ status: "failed", reason: lost.kind === "failed" ? lost.reason : "" }]);
        const g = recording(seq(1), { effect: "read_only", retry: { attempts: 2, backoffMs: 1 } });
        expect(text(await governToolCall(g.deps, call("alpha__do_it")))).toBe("ok");
        expect(g.seen).toHaveLength(2);
        expect(g.outcomes).toEqual([{ status: "succeeded", reason: undefined }]);
      });

      it("an auth failure is never retried, even flagged as a connection failure", async () => {
        const f = recording(seq(1, { kind: "failed", reason: "upstream alpha: refused the gateway's brokered credential (HTTP 401)", auth: true }), {
          effect: "read_only",
        });
        const a = await governToolCall(f.deps, call("alpha__do_it"));
        expect(f.seen).toHaveLength(1);
        expect(a.response.result?.isError).toBe(true);
        const g = recording(seq(1, { ...lost, auth: true }), { effect: "read_only", retry: { attempts: 2, backoffMs: 1 } });
        await governToolCall(g.deps, call("alpha__do_it"));
        expect(g.seen).toHaveLength(1);
      });
    });

    it("the mapping's timeout replaces the upstream's for this call only", async () => {
      const timeouts: number[] = [];
      const f = fakes(answered({ content: [] }), {
        mappings: mapped({ timeoutMs: 250 }),
        upstream: {
          call: async (target) => {
            timeouts.push(target.upstream.timeoutMs);
            return answered({ content: [] });
          },
        },
      });
      await governToolCall(f.deps, call("alpha__do_it"));
      expect(timeouts).toEqual([250]);
      expect(up.timeoutMs).toBe(1000);
    });
  });

  it("advise: the call runs and its result gets one advisory block naming what enforce would have done", async () => {
    const f = fakes(answered({ content: [{ type: "text", text: "done" }] }), {
      policy: {
        ...OPEN_POLICY,
        mode: "advise",
        decide: () => ({
          decision: "allow",
          rule: "r9",
          reason: "allowed in advise mode",
          obligations: [],
          mode: "advise",
          policyVersion: "p",
          wouldBlock: { rule: "r9", reason: "rule r9: no writes on Fridays", decision: "deny" },
        }),
      },
    });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    const content = a.response.result?.content as JsonObject[];
    expect(f.seen).toHaveLength(1);
    expect(content).toHaveLength(2);
    expect(content[0]).toEqual({ type: "text", text: "done" });
    expect(content[1]!.text).toBe("Portcullis advisory (nothing was blocked): enforce would block this call — rule r9: no writes on Fridays");
  });

  it("budgets: a refused admission blocks before anything is recorded or forwarded; admission is skipped when nothing needs history", async () => {
    const admitted: string[] = [];
    const history = {
      ...NO_HISTORY,
      admit: async (e: { exposedName: string }) => {
        admitted.push(e.exposedName);
        return admitted.length > 2 ? ({ ok: false, budget: "grant", used: 2, limit: 2 } as const) : ({ ok: true } as const);
      },
    };
    const f = fakes(answered({ content: [] }), { history, policy: { ...OPEN_POLICY, limits: () => ({ grantCalls: 2 }) } });
    for (let i = 0; i < 2; i++) await governToolCall(f.deps, call("alpha__do_it"));
    const third = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.seen).toHaveLength(2);
    expect(text(third)).toContain("the grant budget is spent: 2 of 2 calls");
    expect(text(third)).toContain("check: budget");
    const none = fakes(answered({ content: [] }), { history: { ...NO_HISTORY, admit: async () => Promise.reject(new Error("never called")) } });
    await governToolCall(none.deps, call("alpha__do_it"));
    expect(none.seen).toHaveLength(1);
  });

  describe("fail closed: a step that throws refuses the call and the upstream sees nothing", () => {
    const boom = async (): Promise<never> => {
      throw new Error("store unreachable");
    };
    const cases: [string, Partial<GovernanceDeps>][] = [
      ["resolve", { catalog: { resolve: boom } }],
      ["kill_switch", { killSwitch: { read: boom } }],
      [
        "classify",
        {
          mappings: {
            loaded: true,
            get: () => {
              throw new Error("bad mapping");
            },
          },
        },
      ],
      ["policy", { policy: { ...OPEN_POLICY, version: "p", decide: boom } }],
      [
        "hold",
        {
          policy: {
            ...OPEN_POLICY,
            version: "p",
            decide: async () => ({ decision: "require_approval", rule: "r", reason: "risky", obligations: [], mode: "enforce", policyVersion: "p" }),
          },
          holds: { settle: boom, complete: async () => undefined, release: async () => undefined },
        },
      ],
      ["ledger", { ledger: { ...NO_LEDGER, decision: boom } }],
    ];
    for (const [stepName, over] of cases) {
      it(stepName, async () => {
        const f = fakes(answered({ content: [] }), over);
        const a = await governToolCall(f.deps, call("alpha__do_it"));
        expect(f.seen).toHaveLength(0);
        expect(a.response.result?.isError).toBe(true);
        expect(text(a)).toContain(`the ${stepName} step could not answer`);
        expect(text(a)).toContain("refused to fail closed");
      });
    }
    it("an outcome that cannot be recorded withholds the result", async () => {
      const f = fakes(answered({ content: [{ type: "text", text: "the answer" }] }), { ledger: { ...NO_LEDGER, outcome: boom } });
      const a = await governToolCall(f.deps, call("alpha__do_it"));
      expect(f.seen).toHaveLength(1);
      expect(text(a)).toContain("the ledger step could not answer");
      expect(JSON.stringify(a)).not.toContain("the answer");
    });
  });

  it("a catalog the upstream cannot serve answers like the upstream leg would", async () => {
    const f = fakes(answered({ content: [] }), {
      catalog: {
        resolve: async () => {
          throw new CatalogUnreadable("alpha", { kind: "failed", reason: "upstream alpha: unreachable", auth: false });
        },
      },
    });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(a.response.error?.message).toBe("upstream alpha: unreachable");
    expect(f.seen).toHaveLength(0);
  });

  it("the shipped pass-throughs (no halts, no mappings, open policy, no ledger) let an allowed call through", async () => {
    const f = fakes(answered({ content: [] }), { killSwitch: NO_HALTS, mappings: NO_MAPPINGS, policy: OPEN_POLICY, ledger: NO_LEDGER });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.seen).toHaveLength(1);
    expect(a.response.result).toEqual({ content: [] });
  });
});

describe("governedPassThrough", () => {
  it("forwards when nothing is halted and refuses (never forwarding) under a halt or a kill switch that cannot answer", async () => {
    let forwarded = 0;
    const fwd = async (): Promise<LegResult> => {
      forwarded++;
      return answered({ task: { taskId: "t1" } });
    };
    const ok = fakes(answered({}));
    const a = await governedPassThrough(ok.deps, { call: call(""), upstream: up }, fwd);
    expect(a.response.result).toEqual({ task: { taskId: "t1" } });
    const halted = fakes(answered({}), {
      killSwitch: { read: async () => ({ version: 3, halts: [{ scope: "upstream", target: "alpha", reason: "maintenance" }] }) },
    });
    const h = await governedPassThrough(halted.deps, { call: call(""), upstream: up }, fwd);
    expect(h.response.error?.message).toContain("maintenance");
    const broken = fakes(answered({}), {
      killSwitch: {
        read: async () => {
          throw new Error("down");
        },
      },
    });
    const b = await governedPassThrough(broken.deps, { call: call(""), upstream: up }, fwd);
    expect(b.response.error?.message).toContain("refused to fail closed");
    expect(forwarded).toBe(1);
  });
});

describe("schema hash", () => {
  it("is SHA-256 over the RFC 8785 canonical JSON of the schemas: key order and spacing do not matter, a change does", async () => {
    const a = await schemaHash({ name: "t", inputSchema: { type: "object", properties: { b: { type: "string" }, a: { type: "number" } } } });
    const b = await schemaHash({
      inputSchema: { properties: { a: { type: "number" }, b: { type: "string" } }, type: "object" },
      name: "renamed",
      description: "x",
    });
    const c = await schemaHash({ inputSchema: { type: "object", properties: { a: { type: "integer" }, b: { type: "string" } } } });
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(a).toBe(b);
    expect(a).not.toBe(c);
    // The canonical form of {"inputSchema":{}} hashed independently.
    const known = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode('{"inputSchema":{}}'))), (x) =>
      x.toString(16).padStart(2, "0"),
    ).join("");
    expect(await schemaHash({ name: "empty" })).toBe(known);
  });
});

describe("governToolCall: the hold step's verdicts", () => {
  const needsApproval = {
    ...OPEN_POLICY,
    version: "p",
    decide: async (): Promise<Decision> => ({
      decision: "require_approval",
      rule: "big",
      reason: "risky",
      obligations: [],
      mode: "enforce",
      policyVersion: "p",
    }),
  };
  function holdsLog(verdict: Awaited<ReturnType<GovernanceDeps["holds"]["settle"]>>) {
    const log: string[] = [];
    const holds: GovernanceDeps["holds"] = {
      settle: async () => verdict,
      complete: async (id, answer) => {
        log.push(`complete:${id}:${JSON.stringify(answer.result ?? answer.error)}`);
      },
      release: async (id, reason) => {
        log.push(`release:${id}:${reason}`);
      },
    };
    return { holds, log };
  }

  it("consumed: the call runs once, the decision names the hold, and its final answer is kept for replay", async () => {
    const h = holdsLog({ proceed: true, holdId: "infra~aaaaaaaaaaaaaaaaaaaaaaaa" });
    const decisions: unknown[] = [];
    const f = fakes(answered({ content: [{ type: "text", text: "done" }] }), {
      policy: needsApproval,
      holds: h.holds,
      ledger: {
        ...NO_LEDGER,
        decision: async (r) => {
          decisions.push(r.holdId);
          return { chain: "infra", seq: 1, hash: "h1", decision_id: "d1" };
        },
      },
    });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.seen).toHaveLength(1);
    expect(decisions).toEqual(["infra~aaaaaaaaaaaaaaaaaaaaaaaa"]);
    expect(text(a)).toBe("done");
    expect(h.log).toHaveLength(1);
    expect(h.log[0]).toContain("complete:infra~aaaaaaaaaaaaaaaaaaaaaaaa:");
    expect(h.log[0]).toContain("done");
  });

  it("consumed but the write-ahead fails: nothing is forwarded and the hold is released (approvable again)", async () => {
    const h = holdsLog({ proceed: true, holdId: "infra~bbbbbbbbbbbbbbbbbbbbbbbb" });
    const f = fakes(answered({ content: [] }), {
      policy: needsApproval,
      holds: h.holds,
      ledger: {
        ...NO_LEDGER,
        decision: async () => {
          throw new Error("ledger down");
        },
      },
    });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.seen).toHaveLength(0);
    expect(a.response.result?.isError).toBe(true);
    expect(h.log[0]).toMatch(/^release:infra~bbbbbbbbbbbbbbbbbbbbbbbb:.*ledger down/);
    // The refusal itself is what identical retries would replay if the hold stayed consumed; it was released instead.
    expect(h.log.filter((l) => l.startsWith("complete:"))).toHaveLength(1);
  });

  it("replay: the recorded answer comes back under this request's id and the upstream sees nothing", async () => {
    const h = holdsLog({
      proceed: false,
      holdId: "infra~c",
      answer: { jsonrpc: "2.0", id: "first", result: { content: [{ type: "text", text: "from the first run" }] } },
    });
    const f = fakes(answered({ content: [] }), { policy: needsApproval, holds: h.holds });
    const a = await governToolCall(f.deps, call("alpha__do_it"));
    expect(f.seen).toHaveLength(0);
    expect(a.response.id).toBe(7);
    expect(text(a)).toBe("from the first run");
    expect(f.events).not.toContain("write_ahead");
  });

  it("a created hold is refused with its own record (no second blocked record); a pending one gets a blocked record", async () => {
    const created = holdsLog({ proceed: false, holdId: "infra~d", recorded: "rec-1", refusal: { check: "hold", reason: "held as infra~d" } });
    const f1 = fakes(answered({ content: [] }), { policy: needsApproval, holds: created.holds });
    const a1 = await governToolCall(f1.deps, call("alpha__do_it"));
    expect(f1.seen).toHaveLength(0);
    expect(text(a1)).toContain("held as infra~d");
    expect(text(a1)).toContain("decision: rec-1");
    expect(f1.events.filter((e) => e.startsWith("blocked"))).toEqual([]);
    const pending = holdsLog({ proceed: false, holdId: "infra~d", refusal: { check: "hold", reason: "still held" } });
    const f2 = fakes(answered({ content: [] }), { policy: needsApproval, holds: pending.holds });
    await governToolCall(f2.deps, call("alpha__do_it"));
    expect(f2.events).toContain("blocked:hold");
    expect(f2.seen).toHaveLength(0);
  });
});
