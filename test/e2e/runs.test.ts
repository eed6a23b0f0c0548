/**
 * [R] Runs and rollback end to end on the production build (wrangler dev, workerd): one gateway in
 * front of the notes upstream (test/e2e/notes-upstream.ts, which counts every tools/call and
 * honours idempotency keys), with mappings that declare compensations and read-backs. Shows: an
 * agent's run (its legacy session) of three creates and an update is planned as four
 * compensations newest first; the dry run reaches the upstream zero times; execution undoes all
 * four, each read back `verified`; a second execution compensates nothing; a compensation that
 * fails twice is retried and recorded, one that always fails is recorded failed after 3 attempts
 * and the rollback names the steps that remain; a compensation that needs approval is skipped
 * (nothing called) until the operator also approves compensations; a result that broke its outputSchema makes its
 * step not automatically reversible; another principal's run is not found (404) for an agent,
 * and an agent grant cannot execute a rollback (403); the operator tools answer the same; a halt
 * covering the upstream refuses the compensation (the upstream sees nothing); validate_mapping
 * names a compensation tool the upstream does not offer; `portcullis runs list|show|rollback`; the
 * agent tools on /mcp (`portcullis.list_runs`, `get_run`, `get_action_trace`, `plan_rollback`,
 * `dry_run_rollback`, `validate_mapping`) answer about the caller's own runs only; an agent that
 * sends the compensating tool first with `_meta["portcullis/idempotency_key"]` set to what it can
 * compute reaches the upstream without that key (the decision names it as stripped) and the
 * rollback still compensates, `verified`; keys reach the ledger and reports only as SHA-256. Owns
 * the gateway and upstream it starts. Must never: leave them running, or reach beyond 127.0.0.1.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { canonicalHash, sha256Hex } from "../../src/wire/canonical.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { resolve } from "node:path";
import { root } from "./harness.ts";
import { api, grantFor, ledgerKinds, modern, runScript } from "./mcp.ts";
import { notesGatewayConfig, type NotesUpstream, startNotesUpstream } from "./notes-upstream.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

let notes: NotesUpstream;
let gw: Proc & { url: string; origin: string };
let jwk = "";
let operator = "";
let auditor = "";
let admin = "";

const config = (url: string) =>
  notesGatewayConfig(
    url,
    "local:runs",
    `      create_draft:
        effect: reversible
        compensation:
          tool: delete_note
          arguments: { id: "$result.id" }
      publish_note:
        effect: reversible
        compensation:
          tool: delete_note
          arguments: { id: "$result.id" }
          approval: required
          verification: { tool: read_note, arguments: { id: "$result.id" }, expect: { exists: false } }
`,
  );

const agentGrant = async (sub: string) => (await grantFor(jwk, gw.origin, { sub, team: "runs", roles: ["agent"], tools: ["*"], ttlSeconds: 900 })).token;

/** An agent's legacy session: its session id is the run id. */
const open: (() => Promise<void>)[] = [];
async function agentRun(token: string): Promise<{ client: Client; run: string }> {
  const client = new Client({ name: "runs-e2e", version: "1" }, { versionNegotiation: { mode: "legacy" } });
  const transport = new StreamableHTTPClientTransport(new URL(gw.url), { requestInit: { headers: { authorization: `Bearer ${token}` } } });
  await client.connect(transport);
  open.push(async () => {
    await transport.terminateSession().catch(() => undefined);
    await client.close().catch(() => undefined);
  });
  const run = transport.sessionId;
  if (!run) throw new Error("the gateway gave no session id");
  return { client, run };
}
afterEach(async () => {
  for (const close of open.splice(0)) await close();
});

const structured = async (client: Client, name: string, args: Record<string, unknown>): Promise<Any> => {
  const r: Any = await client.callTool({ name, arguments: args });
  expect(r.isError, JSON.stringify(r)).not.toBe(true);
  return r.structuredContent;
};
const rollback = (bearer: string, run: string, body: Record<string, unknown>) => api(gw.origin, bearer, `/v1/runs/${run}/rollback`, { method: "POST", body });
const operatorTool = async (bearer: string, name: string, args: Record<string, unknown>): Promise<Any> =>
  (await modern(`${gw.origin}/operator/mcp`, bearer, "tools/call", { name, arguments: args })).result;

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("runs-e2e")).privateJwk);
  notes = await startNotesUpstream();
  const port = await freePort();
  const started = await startPortcullis(config(notes.url), port, { PORTCULLIS_SIGNING_KEY: jwk });
  gw = { ...started, origin: `http://127.0.0.1:${port}` };
  operator = (await grantFor(jwk, gw.origin, { sub: "human:olga", team: "runs", roles: ["operator"], tools: [], ttlSeconds: 900 })).token;
  auditor = (await grantFor(jwk, gw.origin, { sub: "human:audrey", team: "runs", roles: ["auditor"], tools: [], ttlSeconds: 900 })).token;
  admin = (await grantFor(jwk, gw.origin, { sub: "human:ada", team: "runs", roles: ["admin"], tools: [], ttlSeconds: 900 })).token;
}, 240_000);
afterAll(async () => {
  await gw?.stop();
  await notes?.close();
});

describe("rollback of a run", () => {
  it("plans four compensations newest first, a dry run calls nothing, execution undoes all four (verified), a second execution compensates nothing", async () => {
    const token = await agentGrant("agent:writer");
    const { client, run } = await agentRun(token);
    const a = await structured(client, "create_note", { title: "alpha" });
    const b = await structured(client, "create_note", { title: "beta" });
    const c = await structured(client, "create_note", { title: "gamma" });
    await structured(client, "update_note", { id: b.id, title: "beta (edited)" });
    expect(notes.notes.get(b.id)).toBe("beta (edited)");
    await structured(client, "read_note", { id: a.id });

    const listed = await api(gw.origin, operator, "/v1/runs");
    expect(listed.status, JSON.stringify(listed.json)).toBe(200);
    expect(listed.json.runs.find((r: Any) => r.run === run)).toMatchObject({ principal: "agent:writer", steps: 5 });

    const shown = await api(gw.origin, operator, `/v1/runs/${run}`);
    expect(shown.status, JSON.stringify(shown.json)).toBe(200);
    expect(shown.json.run.steps.map((s: Any) => s.tool)).toEqual(["create_note", "create_note", "create_note", "update_note", "read_note"]);
    const plan = shown.json.plan;
    expect(plan.compensations.map((s: Any) => [s.step_tool, s.tool, s.arguments])).toEqual([
      ["update_note", "update_note", { id: b.id, title: "beta" }],
      ["create_note", "delete_note", { id: c.id }],
      ["create_note", "delete_note", { id: b.id }],
      ["create_note", "delete_note", { id: a.id }],
    ]);
    expect(plan.not_reversible).toEqual([]);
    expect(plan.nothing_to_undo).toHaveLength(1); // the read
    // The plan carries no idempotency key (an agent reads its own plans): keys are derived only when a compensation runs.
    expect(JSON.stringify(plan)).not.toMatch(/idempotency_key"/);

    const before = notes.total();
    const dry = await rollback(operator, run, {});
    expect(dry.status, JSON.stringify(dry.json)).toBe(200);
    expect(dry.json.dry_run).toBe(true);
    expect(dry.json.steps.map((s: Any) => s.state)).toEqual(["would_run", "would_run", "would_run", "would_run"]);
    expect(notes.total()).toBe(before);

    const done = await rollback(operator, run, { confirm: true });
    expect(done.status, JSON.stringify(done.json)).toBe(200);
    expect(done.json.steps.map((s: Any) => [s.tool, s.state, s.verification, s.attempts])).toEqual([
      ["update_note", "compensated", "verified", 1],
      ["delete_note", "compensated", "verified", 1],
      ["delete_note", "compensated", "verified", 1],
      ["delete_note", "compensated", "verified", 1],
    ]);
    expect(done.json.remaining).toEqual([]);
    expect(done.json.complete).toBe(true);
    for (const n of [a, b, c]) expect(notes.notes.has(n.id)).toBe(false);
    // Each compensation carried its step's own key to the upstream; the report (and the ledger) keep only its SHA-256.
    const keyed = notes.log.slice(before).filter((l) => l.tool !== "read_note");
    expect(keyed.map((l) => sha256Hex(l.key ?? ""))).toEqual(done.json.steps.map((s: Any) => s.idempotency_key_sha256));
    expect(new Set(keyed.map((l) => l.key)).size).toBe(4);
    expect(keyed.every((l) => l.applied)).toBe(true);
    // None is what an agent could compute from its run id and its receipts' decision ids.
    expect(keyed.map((l) => l.key)).not.toContain(canonicalHash({ run, step: plan.compensations[0].decision_id }));
    expect(JSON.stringify(done.json)).not.toContain(keyed[0]!.key!);

    const mid = notes.total();
    const again = await rollback(operator, run, { confirm: true });
    expect(again.status).toBe(200);
    expect(again.json.steps).toEqual([]);
    expect(again.json.plan.already_compensated).toHaveLength(4);
    expect(notes.total()).toBe(mid);

    // Every step is on the ledger: started and compensated, with its key's SHA-256 (never the key) and verification.
    const steps = await ledgerKinds(gw.origin, auditor, "rollback.step", (es) => es.filter((e: Any) => e.body.run === run).length >= 8);
    const mine = steps.filter((e: Any) => e.body.run === run);
    expect(mine.filter((e: Any) => e.body.state === "started")).toHaveLength(4);
    expect(
      mine
        .filter((e: Any) => e.body.state === "started")
        .map((e: Any) => e.body.idempotency_key_sha256)
        .sort(),
    ).toEqual(keyed.map((l) => sha256Hex(l.key ?? "")).sort());
    expect(mine.every((e: Any) => e.body.idempotency_key_id === "runs-e2e")).toBe(true);
    for (const l of keyed) expect(JSON.stringify(mine)).not.toContain(l.key!);
    expect(mine.filter((e: Any) => e.body.state === "compensated").map((e: Any) => e.body.verification)).toEqual([
      "verified",
      "verified",
      "verified",
      "verified",
    ]);
    // The outcome of a compensable call keeps the resolved compensation (only the referenced values).
    const outcomes = await ledgerKinds(gw.origin, auditor, "outcome", (es) => es.some((e: Any) => e.body.compensation?.arguments?.id === a.id));
    const kept = outcomes.find((e: Any) => e.body.compensation?.arguments?.id === a.id);
    expect(kept.body.compensation).toEqual({
      v: 1,
      status: "planned",
      tool: "delete_note",
      arguments: { id: a.id },
      approval: "none",
      verification: { tool: "read_note", arguments: { id: a.id }, expect: { exists: false } },
    });
  });

  it("retries a compensation that fails twice, and records one that always fails after 3 attempts, naming the steps that remain", async () => {
    const token = await agentGrant("agent:flaky");
    const first = await agentRun(token);
    const x = await structured(first.client, "create_note", { title: "x" });
    const y = await structured(first.client, "create_note", { title: "y" });
    notes.failNext.set("delete_note", 2);
    const r = await rollback(operator, first.run, { confirm: true });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.json.steps.map((s: Any) => [s.state, s.attempts, s.verification])).toEqual([
      ["compensated", 3, "verified"],
      ["compensated", 1, "verified"],
    ]);
    expect(r.json.steps[0].errors).toHaveLength(2);
    expect(notes.notes.has(x.id) || notes.notes.has(y.id)).toBe(false);

    const second = await agentRun(token);
    const p = await structured(second.client, "create_note", { title: "p" });
    const q = await structured(second.client, "create_note", { title: "q" });
    notes.failAlways.add("delete_note");
    try {
      const before = notes.calls.get("delete_note") ?? 0;
      const f = await rollback(operator, second.run, { confirm: true });
      expect(f.status, JSON.stringify(f.json)).toBe(200);
      expect(f.json.steps.map((s: Any) => [s.state, s.attempts])).toEqual([
        ["failed", 3],
        ["not_run", 0],
      ]);
      expect(notes.calls.get("delete_note")).toBe(before + 3);
      expect(f.json.complete).toBe(false);
      expect(f.json.remaining).toEqual(f.json.plan.compensations.map((s: Any) => s.decision_id));
      expect(notes.notes.has(p.id) && notes.notes.has(q.id)).toBe(true);
      const shown = await api(gw.origin, operator, `/v1/runs/${second.run}`);
      expect(shown.json.run.steps.map((s: Any) => s.rollback?.state ?? null)).toEqual([null, "failed"]);
      expect(shown.json.run.steps[1].rollback.attempts).toBe(3);
    } finally {
      notes.failAlways.delete("delete_note");
    }
    // Once the upstream recovers, the same rollback finishes what remained.
    const again = await rollback(operator, second.run, { confirm: true });
    expect(again.json.steps.map((s: Any) => s.state)).toEqual(["compensated", "compensated"]);
    expect(notes.notes.has(p.id) || notes.notes.has(q.id)).toBe(false);
  });

  it("a compensation whose mapping says approval: required is skipped (nothing called) until the operator also approves compensations", async () => {
    const token = await agentGrant("agent:publisher");
    const { client, run } = await agentRun(token);
    const n = await structured(client, "publish_note", { title: "press release" });
    const shown = await api(gw.origin, operator, `/v1/runs/${run}`);
    expect(shown.json.plan.compensations.map((c: Any) => [c.tool, c.needs_approval])).toEqual([["delete_note", true]]);
    const before = notes.total();
    const first = await rollback(operator, run, { confirm: true });
    expect(first.status, JSON.stringify(first.json)).toBe(200);
    expect(first.json.steps.map((s: Any) => s.state)).toEqual(["skipped"]);
    expect(first.json.steps[0].reason).toMatch(/approv/);
    expect(first.json.remaining).toHaveLength(1);
    expect(notes.total()).toBe(before);
    expect(notes.notes.has(n.id)).toBe(true);
    const approved = await rollback(operator, run, { confirm: true, approve_compensations: true });
    expect(approved.json.steps.map((s: Any) => [s.state, s.verification])).toEqual([["compensated", "verified"]]);
    expect(approved.json.remaining).toEqual([]);
    expect(notes.notes.has(n.id)).toBe(false);
    expect(notes.log.filter((l) => l.tool === "delete_note" && l.args.id === n.id)).toHaveLength(1);
  });

  it("a step whose result broke its outputSchema is reported as not automatically reversible", async () => {
    const token = await agentGrant("agent:drafter");
    const { client, run } = await agentRun(token);
    const r: Any = await client.callTool({ name: "create_draft", arguments: { title: "draft" } });
    expect(r.isError).not.toBe(true);
    const shown = await api(gw.origin, operator, `/v1/runs/${run}`);
    expect(shown.status, JSON.stringify(shown.json)).toBe(200);
    expect(shown.json.plan.compensations).toEqual([]);
    expect(shown.json.plan.not_reversible).toHaveLength(1);
    expect(shown.json.plan.not_reversible[0]).toMatchObject({ tool: "create_draft" });
    expect(shown.json.plan.not_reversible[0].reason).toMatch(/outputSchema.*cannot be rolled back automatically/);
  });
});

describe("the portcullis/ _meta namespace is the gateway's", () => {
  it("an agent that pre-sends the compensating call with the rollback's key (as it could compute it) cannot make the upstream swallow the real compensation", async () => {
    const token = await agentGrant("agent:sly");
    const { client, run } = await agentRun(token);
    // The step to be rolled back: a mapped call with a compensation (delete_note, read back), in run `run`.
    const created: Any = await client.callTool({ name: "create_note", arguments: { title: "keep me undone" } });
    expect(created.isError, JSON.stringify(created)).not.toBe(true);
    const note = created.structuredContent.id as string;
    const step = created._meta["portcullis/receipt"].decision_id as string;
    // What the agent can compute: the old key, SHA-256(JCS({run, step})) of its run id and its receipt's decision id.
    const guessed = canonicalHash({ run, step });
    // In another run (so the attacked run stays fully reversible), it sends the compensating tool
    // itself — on a decoy note — with that key, so that an upstream honouring keys would answer the
    // real compensation later from this call, without deleting the note.
    const other = await agentRun(token);
    const decoy = await structured(other.client, "create_note", { title: "decoy" });
    const before = notes.log.length;
    const sent: Any = await other.client.callTool({
      name: "delete_note",
      arguments: { id: decoy.id },
      _meta: { "portcullis/idempotency_key": guessed, "portcullis/anything": "x", "vendor/trace": "t-1" },
    });
    expect(sent.isError, JSON.stringify(sent)).not.toBe(true);
    const pre = notes.log.slice(before).filter((l) => l.tool === "delete_note");
    expect(pre).toHaveLength(1);
    // The upstream got the call without any portcullis/ key of the agent's.
    expect(pre[0]!.key).toBeNull();
    // The decision record says what was dropped: the names, never the values.
    const decisions = await ledgerKinds(gw.origin, auditor, "decision", (es) => es.some((e: Any) => e.id === sent._meta["portcullis/receipt"].decision_id));
    const mine = decisions.find((e: Any) => e.id === sent._meta["portcullis/receipt"].decision_id);
    expect(mine.body.stripped_meta).toEqual(["portcullis/idempotency_key", "portcullis/anything"]);
    expect(JSON.stringify(decisions)).not.toContain(guessed);
    expect(decisions.find((e: Any) => e.id === step).body).not.toHaveProperty("stripped_meta");

    // The operator's rollback of the attacked run still compensates at the upstream, and reads it back.
    const mid = notes.log.length;
    const r = await rollback(operator, run, { confirm: true });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.json.steps.map((s: Any) => [s.decision_id, s.tool, s.state, s.verification])).toEqual([[step, "delete_note", "compensated", "verified"]]);
    expect(r.json.complete).toBe(true);
    const comp = notes.log.slice(mid).filter((l) => l.tool === "delete_note");
    expect(comp).toHaveLength(1);
    expect(comp[0]!.applied).toBe(true);
    expect(comp[0]!.key).not.toBeNull();
    expect(comp[0]!.key).not.toBe(guessed);
    expect(notes.notes.has(note)).toBe(false);
  });
});

describe("who may see and undo a run", () => {
  it("an agent reads and dry-runs its own run only (another's is 404), and cannot execute (403); operator tools answer the same", async () => {
    const owner = await agentGrant("agent:owner");
    const other = await agentGrant("agent:other");
    const { client, run } = await agentRun(owner);
    const n = await structured(client, "create_note", { title: "mine" });

    expect((await api(gw.origin, owner, `/v1/runs/${run}`)).status).toBe(200);
    const mine = await api(gw.origin, owner, "/v1/runs");
    expect(mine.json.runs.map((r: Any) => r.principal)).toEqual(["agent:owner"]);
    const peek = await api(gw.origin, other, `/v1/runs/${run}`);
    expect(peek.status).toBe(404);
    expect(JSON.stringify(peek.json)).not.toContain("agent:owner");
    expect((await rollback(other, run, {})).status).toBe(404);
    expect((await api(gw.origin, other, "/v1/runs")).json.runs.some((r: Any) => r.run === run)).toBe(false);

    const before = notes.total();
    expect((await rollback(owner, run, {})).status).toBe(200);
    const refused = await rollback(owner, run, { confirm: true });
    expect(refused.status).toBe(403);
    expect(refused.json.error).toMatch(/operator role/);
    expect(notes.total()).toBe(before);
    expect(notes.notes.has(n.id)).toBe(true);

    // The operator endpoint: an auditor plans but has no execute_rollback; the operator executes.
    const plan = await operatorTool(auditor, "portcullis.plan_rollback", { run });
    expect(plan.isError, JSON.stringify(plan)).not.toBe(true);
    expect(plan.structuredContent.compensations).toHaveLength(1);
    const denied: Any = await modern(`${gw.origin}/operator/mcp`, auditor, "tools/call", { name: "portcullis.execute_rollback", arguments: { run } });
    expect(denied.error?.message).toMatch(/Unknown tool/);
    const executed = await operatorTool(operator, "portcullis.execute_rollback", { run });
    expect(executed.isError, JSON.stringify(executed)).not.toBe(true);
    expect(executed.structuredContent.steps.map((s: Any) => [s.state, s.verification])).toEqual([["compensated", "verified"]]);
    expect(notes.notes.has(n.id)).toBe(false);
  });
});

describe("kill switch, validate_mapping and the CLI", () => {
  it("a halt covering the upstream refuses the compensation before anything reaches it; after resume the rollback runs", async () => {
    const token = await agentGrant("agent:halted");
    const { client, run } = await agentRun(token);
    const n = await structured(client, "create_note", { title: "kept while halted" });
    const halt = await api(gw.origin, admin, "/v1/killswitch/halt", { method: "POST", body: { scope: "upstream", target: "notes", reason: "incident 7" } });
    expect(halt.status, JSON.stringify(halt.json)).toBe(200);
    try {
      await new Promise((r) => setTimeout(r, 1200)); // the isolate's kill-switch cache lives at most 1 s
      const before = notes.total();
      const r = await rollback(operator, run, { confirm: true });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(r.json.steps.map((s: Any) => s.state)).toEqual(["failed"]);
      expect(r.json.steps[0].reason).toMatch(/halted \(upstream notes\): incident 7/);
      expect(r.json.remaining).toHaveLength(1);
      expect(notes.total()).toBe(before);
      expect(notes.notes.has(n.id)).toBe(true);
    } finally {
      await api(gw.origin, admin, "/v1/killswitch/resume", { method: "POST", body: { scope: "upstream", target: "notes", reason: "over" } });
    }
    await new Promise((r) => setTimeout(r, 1200));
    const again = await rollback(operator, run, { confirm: true });
    expect(again.json.steps.map((s: Any) => [s.state, s.verification])).toEqual([["compensated", "verified"]]);
    expect(notes.notes.has(n.id)).toBe(false);
  });

  it("portcullis.validate_mapping checks references and, from the upstream's tools/list, that every named tool exists", async () => {
    const good = await operatorTool(operator, "portcullis.validate_mapping", {
      upstream: "notes",
      mapping: {
        tools: {
          create_note: { effect: "reversible", compensation: { tool: "delete_note", arguments: { id: "$result.id" } } },
          delete_note: { effect: "irreversible" },
        },
      },
    });
    expect(good.structuredContent, JSON.stringify(good)).toEqual({ upstream: "notes", valid: true, problems: [], tools_checked: true });
    const bad = await operatorTool(operator, "portcullis.validate_mapping", {
      upstream: "notes",
      mapping: {
        tools: {
          create_note: { effect: "reversible", compensation: { tool: "undo_everything", verification: { tool: "read_note", expect: { exists: false } } } },
          undo_everything: { effect: "irreversible" },
          read_note: { effect: "read_only" },
          shred: { effect: "irreversible" },
        },
      },
    });
    expect(bad.structuredContent.valid).toBe(false);
    expect(bad.structuredContent.problems).toEqual([
      "mappings/notes.yaml.tools.undo_everything: upstream notes offers no tool undo_everything",
      "mappings/notes.yaml.tools.shred: upstream notes offers no tool shred",
    ]);
    const broken = await operatorTool(operator, "portcullis.validate_mapping", {
      upstream: "notes",
      mapping: { tools: { create_note: { effect: "reversible", compensation: { tool: "delete_note", arguments: { id: "$result..id" } } } } },
    });
    expect(broken.structuredContent.valid).toBe(false);
    expect(broken.structuredContent.problems[0]).toMatch(
      /^mappings\/notes\.yaml\.tools\.create_note\.compensation\.arguments\.id: "\$result\.\.id" is not a reference/,
    );
  });

  it("portcullis runs list|show|rollback: the plan, a dry run, then the rollback (exit 0), with --json", async () => {
    const token = await agentGrant("agent:cli");
    const { client, run } = await agentRun(token);
    const n = await structured(client, "create_note", { title: "from the cli" });
    const cli = (args: string[]) => runScript(resolve(root, "bin/portcullis.mjs"), ["runs", ...args, "--url", gw.origin], { PORTCULLIS_TOKEN: operator });
    const list = await cli(["list", "--principal", "agent:cli"]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toContain(run);
    const show = await cli(["show", run]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toContain(`undo create_note`);
    expect(show.stdout).toContain(`notes delete_note {"id":"${n.id}"}`);
    const before = notes.total();
    const dry = await cli(["rollback", run]);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/dry run/);
    expect(notes.total()).toBe(before);
    const done = await cli(["rollback", run, "--confirm", "--json"]);
    expect(done.code, done.stderr).toBe(0);
    expect(JSON.parse(done.stdout).steps.map((s: Any) => [s.state, s.verification])).toEqual([["compensated", "verified"]]);
    expect(notes.notes.has(n.id)).toBe(false);
    const refused = await runScript(resolve(root, "bin/portcullis.mjs"), ["runs", "rollback", run, "--confirm", "--url", gw.origin], {
      PORTCULLIS_TOKEN: token,
    });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/operator role/);
  });
});

describe("agent tools on /mcp", () => {
  it("list_runs, get_run, get_action_trace, plan_rollback, dry_run_rollback and validate_mapping answer about the caller's own runs only", async () => {
    const owner = await agentGrant("agent:tools");
    const other = await agentGrant("agent:nosy");
    const { client, run } = await agentRun(owner);
    const created: Any = await client.callTool({ name: "create_note", arguments: { title: "agent tools" } });
    const decisionId = created._meta["portcullis/receipt"].decision_id;
    const listed = (await client.listTools()).tools.map((t: Any) => t.name);
    expect(listed).toEqual(
      expect.arrayContaining([
        "portcullis.list_runs",
        "portcullis.get_run",
        "portcullis.get_action_trace",
        "portcullis.plan_rollback",
        "portcullis.dry_run_rollback",
        "portcullis.validate_mapping",
      ]),
    );
    expect(listed).not.toContain("portcullis.execute_rollback");
    const as = async (c: Client, name: string, args: Record<string, unknown>): Promise<Any> => c.callTool({ name, arguments: args });

    const runs = await as(client, "portcullis.list_runs", {});
    expect(
      runs.structuredContent?.runs?.map((r: Any) => [r.run, r.principal]),
      JSON.stringify(runs),
    ).toEqual([[run, "agent:tools"]]);
    const got = await as(client, "portcullis.get_run", { run });
    expect(got.structuredContent.run.steps.map((s: Any) => s.tool)).toEqual(["create_note"]);
    const plan = await as(client, "portcullis.plan_rollback", { run });
    expect(plan.structuredContent.compensations.map((c: Any) => [c.tool, c.arguments])).toEqual([["delete_note", { id: created.structuredContent.id }]]);
    const before = notes.total();
    const dry = await as(client, "portcullis.dry_run_rollback", { run });
    expect(dry.structuredContent).toMatchObject({ dry_run: true, steps: [{ state: "would_run", tool: "delete_note" }] });
    expect(notes.total()).toBe(before);
    const trace = await as(client, "portcullis.get_action_trace", { id: decisionId });
    expect(trace.structuredContent.records.map((r: Any) => r.kind)).toEqual(["decision", "outcome"]);
    const valid = await as(client, "portcullis.validate_mapping", {
      upstream: "notes",
      mapping: { tools: { create_note: { effect: "reversible", compensation: { tool: "shred_note" } }, shred_note: { effect: "irreversible" } } },
    });
    expect(valid.structuredContent.problems).toEqual(["mappings/notes.yaml.tools.shred_note: upstream notes offers no tool shred_note"]);
    // Unknown at load: a compensation tool this mapping does not map is refused before any upstream is asked.
    const unmapped = await as(client, "portcullis.validate_mapping", {
      upstream: "notes",
      mapping: { tools: { create_note: { effect: "reversible", compensation: { tool: "delete_note" } } } },
    });
    expect(unmapped.structuredContent).toMatchObject({ valid: false, tools_checked: false });
    expect(unmapped.structuredContent.problems[0]).toMatch(/tools\.create_note\.compensation\.tool: "delete_note" is not a tool of this mapping/);

    // Another principal: not found, whatever it asks.
    const nosy = (await agentRun(other)).client;
    for (const [name, args] of [
      ["portcullis.get_run", { run }],
      ["portcullis.plan_rollback", { run }],
      ["portcullis.dry_run_rollback", { run }],
      ["portcullis.get_action_trace", { id: decisionId }],
    ] as const) {
      const r = await as(nosy, name, args);
      expect(r.isError, name).toBe(true);
      expect(JSON.stringify(r), name).not.toContain("agent:tools");
    }
    expect((await as(nosy, "portcullis.list_runs", {})).structuredContent.runs.some((r: Any) => r.run === run)).toBe(false);
    expect((await as(client, "portcullis.get_run", { run, principal: "agent:nosy" })).isError).toBe(true);
    expect(notes.notes.has(created.structuredContent.id)).toBe(true);
  });
});
