/**
 * [R] The pure rollback logic (src/governance/rollback.ts, compensation.ts, idempotency.ts) and the compensation rules of the
 * mapping schema (src/config/mapping-schema.ts): load-time checks of a compensation's shape and
 * references; resolving `$args` / `$result` (structuredContent, or one text block of JSON) into
 * the record an outcome keeps, and refusing to when the result broke its outputSchema, the call
 * failed or was uncertain, or a reference names nothing; the idempotency key (an HMAC under the
 * gateway's signing secret: not the old computable hash, one per secret, stable per step, and the
 * signing key a step started with kept for its retries); read-back checks;
 * rebuilding a run from its records (out of order, duplicated, another principal's decisions
 * ignored); and the plan — newest first, approval, not reversible with why, already undone.
 */
import { describe, expect, it } from "vitest";
import { parseMappingFile } from "../../src/config/mapping-schema.ts";
import { compensationFor, resolveTemplate, resultValue, verificationMet } from "../../src/governance/compensation.ts";
import { IDEMPOTENCY_KEY_CONTEXT, idempotencyKey, idempotencyKeyHash, idempotencySecretFrom } from "../../src/governance/idempotency.ts";
import { type PlannedCompensation, planRollback, rollbackStepBody, type RunEntry, runView } from "../../src/governance/rollback.ts";
import type { CompensationSpec } from "../../src/config/mapping-schema.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { canonicalHash } from "../../src/wire/canonical.ts";

const DELETE: CompensationSpec = {
  tool: "delete_note",
  arguments: { id: "$result.id", reason: "rollback" },
  approval: "none",
  verification: { tool: "read_note", arguments: { id: "$result.id" }, expect: { exists: false } },
};
const RESTORE: CompensationSpec = {
  tool: "update_note",
  arguments: { id: "$args.id", title: "$result.previous.title" },
  approval: "required",
};

describe("compensations in mappings (load time)", () => {
  it("parses a compensation with defaults (arguments {}, approval none) and a read-back", () => {
    const r = parseMappingFile(
      {
        tools: {
          create: {
            effect: "reversible",
            compensation: { tool: "delete", arguments: { id: "$result.id" }, verification: { tool: "read", expect: { exists: false } } },
          },
          bump: { effect: "reversible", compensation: { tool: "unbump" } },
          delete: { effect: "irreversible" },
          read: { effect: "read_only" },
          unbump: { effect: "reversible" },
        },
      },
      "mappings/n.yaml",
    );
    expect(r.problems).toEqual([]);
    expect(r.tools.create!.compensation).toEqual({
      tool: "delete",
      arguments: { id: "$result.id" },
      approval: "none",
      verification: { tool: "read", arguments: {}, expect: { exists: false } },
    });
    expect(r.tools.bump!.compensation).toEqual({ tool: "unbump", arguments: {}, approval: "none" });
  });

  it("refuses malformed references, unknown fields, an empty expect, a read_only compensation and $args of redacted arguments — each with its path", () => {
    const r = parseMappingFile(
      {
        tools: {
          a: { effect: "reversible", compensation: { tool: "undo", arguments: { id: "$result." } } },
          b: { effect: "reversible", compensation: { tool: "undo", arguments: { ids: ["$args..x"] } } },
          c: { effect: "reversible", compensation: { tool: "undo", colour: "red" } },
          d: { effect: "reversible", compensation: { tool: "undo", verification: { tool: "read", expect: {} } } },
          e: { effect: "read_only", compensation: { tool: "undo" } },
          f: { effect: "reversible", arguments: "redacted", compensation: { tool: "undo", arguments: { id: "$args.id" } } },
          g: { effect: "reversible", compensation: { tool: "", arguments: {} } },
          h: { effect: "reversible", compensation: { tool: "undo", verification: { tool: "read", expect: { "a..b": 1 } } } },
          undo: { effect: "reversible" },
          read: { effect: "read_only" },
        },
      },
      "mappings/n.yaml",
    );
    const paths = r.problems.map((p) => p.slice(0, p.indexOf(": ")));
    expect(paths.sort()).toEqual(
      [
        "mappings/n.yaml.tools.a.compensation.arguments.id",
        "mappings/n.yaml.tools.b.compensation.arguments.ids[0]",
        "mappings/n.yaml.tools.c.compensation",
        "mappings/n.yaml.tools.d.compensation.verification.expect",
        "mappings/n.yaml.tools.e.compensation",
        "mappings/n.yaml.tools.f.compensation",
        "mappings/n.yaml.tools.g.compensation.tool",
        'mappings/n.yaml.tools.h.compensation.verification.expect["a..b"]',
      ].sort(),
    );
    expect(r.problems.find((p) => p.includes(".tools.a."))).toMatch(/"\$result\." is not a reference/);
    expect(r.problems.find((p) => p.includes(".tools.f."))).toMatch(/redacted/);
    // $result of a redacted tool is fine: the arguments are not what the ledger would keep.
    expect(
      parseMappingFile(
        {
          tools: {
            t: { effect: "reversible", arguments: "redacted", compensation: { tool: "u", arguments: { id: "$result.id" } } },
            u: { effect: "irreversible" },
          },
        },
        "x",
      ).problems,
    ).toEqual([]);
  });

  it("refuses a compensation or read-back tool that this mapping does not map (unknown at load), naming the path", () => {
    const r = parseMappingFile(
      {
        tools: {
          create: { effect: "reversible", compensation: { tool: "delet", verification: { tool: "raed", expect: { exists: false } } } },
          read: { effect: "read_only" },
        },
      },
      "mappings/n.yaml",
    );
    expect(r.problems).toEqual([
      'mappings/n.yaml.tools.create.compensation.tool: "delet" is not a tool of this mapping: map it too (its effect), so the gateway knows what the rollback calls',
      'mappings/n.yaml.tools.create.compensation.verification.tool: "raed" is not a tool of this mapping: map it too (its effect), so the gateway knows what the rollback calls',
    ]);
    expect(r.tools).toEqual({});
  });
});

describe("resolving a compensation against one call", () => {
  it("reads structuredContent, or the JSON of a single text block, and nothing else", () => {
    expect(resultValue({ structuredContent: { id: "n1" }, content: [] })).toEqual({ id: "n1" });
    expect(resultValue({ content: [{ type: "text", text: '{"id":"n2"}' }] })).toEqual({ id: "n2" });
    expect(resultValue({ content: [{ type: "text", text: "created n3" }] })).toBeUndefined();
    expect(
      resultValue({
        content: [
          { type: "text", text: '{"id":1}' },
          { type: "text", text: "{}" },
        ],
      }),
    ).toBeUndefined();
    expect(resultValue(null)).toBeUndefined();
  });

  it("replaces whole-string references (nested, in arrays, array indexes), leaves other strings alone, and names a missing one", () => {
    const args = { id: "n1", tags: ["a", "b"] };
    const result = { items: [{ id: "x" }], previous: { title: "old" } };
    expect(
      resolveTemplate({ a: "$args.id", b: ["$result.items.0.id", "literal $args.id"], c: { t: "$result.previous" }, d: 3, all: "$args" }, args, result),
    ).toEqual({
      ok: true,
      value: { a: "n1", b: ["x", "literal $args.id"], c: { t: { title: "old" } }, d: 3, all: args },
    });
    expect(resolveTemplate({ a: "$args.tags.1" }, args, result)).toEqual({ ok: true, value: { a: "b" } });
    expect(resolveTemplate({ a: "$result.items.5.id" }, args, result)).toEqual({ ok: false, reason: "$result.items.5.id names nothing in the call's result" });
    expect(resolveTemplate({ a: "$args.toString" }, args, result)).toMatchObject({ ok: false });
  });

  it("keeps the resolved compensation — only the referenced values — for a succeeded call", () => {
    const record = compensationFor(
      DELETE,
      { title: "secret-ish body", token: "never kept" },
      "succeeded",
      { structuredContent: { id: "n7", title: "t" }, content: [] },
      [],
    );
    expect(record).toEqual({
      v: 1,
      status: "planned",
      tool: "delete_note",
      arguments: { id: "n7", reason: "rollback" },
      approval: "none",
      verification: { tool: "read_note", arguments: { id: "n7" }, expect: { exists: false } },
    });
    expect(JSON.stringify(record)).not.toContain("never kept");
    expect(
      compensationFor(RESTORE, { id: "n1", title: "new" }, "succeeded", { content: [{ type: "text", text: '{"previous":{"title":"old"}}' }] }, []),
    ).toEqual({
      v: 1,
      status: "planned",
      tool: "update_note",
      arguments: { id: "n1", title: "old" },
      approval: "required",
      verification: null,
    });
  });

  it("builds nothing from a result that broke its outputSchema, a failed or uncertain call, or a reference that names nothing", () => {
    const broken = compensationFor(DELETE, {}, "succeeded", { structuredContent: { id: 42 } }, ["/id: must be string"]);
    expect(broken).toMatchObject({ status: "unavailable" });
    expect((broken as { reason: string }).reason).toMatch(/outputSchema \(\/id: must be string\).*cannot be rolled back automatically/);
    // A compensation that uses no $result does not depend on the result's shape.
    expect(
      compensationFor({ tool: "undo", arguments: { id: "$args.id" }, approval: "none" }, { id: "a" }, "succeeded", { structuredContent: { id: 1 } }, ["bad"]),
    ).toMatchObject({
      status: "planned",
      arguments: { id: "a" },
    });
    expect(compensationFor(DELETE, {}, "failed", null, [])).toMatchObject({ status: "not_needed" });
    expect(compensationFor(DELETE, {}, "uncertain", null, [])).toMatchObject({ status: "unavailable", reason: expect.stringMatching(/uncertain/) });
    expect(compensationFor(DELETE, {}, "succeeded", { structuredContent: { other: 1 } }, [])).toEqual({
      v: 1,
      status: "unavailable",
      reason: "$result.id names nothing in the call's result",
    });
    expect(compensationFor(DELETE, {}, "succeeded", { content: [{ type: "text", text: "done" }] }, [])).toMatchObject({
      status: "unavailable",
      reason: expect.stringMatching(/no structured value/),
    });
  });

  it("the idempotency key is an HMAC under the gateway's signing secret: not the computable hash, one per secret, the same per step", async () => {
    const one = await generateSigningKey("k1");
    const two = await generateSigningKey("k2");
    const s1 = idempotencySecretFrom(JSON.stringify(one.privateJwk), null);
    const s2 = idempotencySecretFrom(JSON.stringify(two.privateJwk), null);
    if ("problem" in s1 || "problem" in s2) throw new Error("no secret");
    expect(s1).toEqual({ kid: "k1", d: one.privateJwk.d });
    const k = await idempotencyKey(s1, "run-1", "d1");
    expect(k).toMatch(/^[0-9a-f]{64}$/);
    // What an agent can compute from its run id and its receipt's decision id is not the key.
    expect(k).not.toBe(canonicalHash({ run: "run-1", step: "d1" }));
    // The same inputs give the same key (every retry); another secret another key; distinct per step and per run.
    expect(await idempotencyKey(s1, "run-1", "d1")).toBe(k);
    expect(await idempotencyKey(s2, "run-1", "d1")).not.toBe(k);
    const keys = await Promise.all([idempotencyKey(s1, "run-1", "d2"), idempotencyKey(s1, "run-2", "d1")]);
    expect(new Set([k, ...keys]).size).toBe(3);
    // It is HMAC-SHA256(SHA-256(context ‖ d), JCS({run, step})).
    const material = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(IDEMPOTENCY_KEY_CONTEXT + one.privateJwk.d));
    const hmac = await crypto.subtle.importKey("raw", material, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    const mac = await crypto.subtle.sign("HMAC", hmac, new TextEncoder().encode('{"run":"run-1","step":"d1"}'));
    expect(k).toBe([...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join(""));
  });

  it("the signing key of idempotency keys: the active one of a key set, the one a step started with on a retry, and no key without a secret", async () => {
    const a = (await generateSigningKey("a")).privateJwk;
    const b = (await generateSigningKey("b")).privateJwk;
    const set = JSON.stringify({ keys: [a, b], active: "b" });
    expect(idempotencySecretFrom(set, null)).toEqual({ kid: "b", d: b.d });
    expect(idempotencySecretFrom(set, "a")).toEqual({ kid: "a", d: a.d });
    expect(idempotencySecretFrom(JSON.stringify({ keys: [b], active: "b" }), "a")).toEqual({ problem: expect.stringMatching(/signing key a .* no longer/) });
    const { kid: _kid, ...noKid } = a;
    expect(idempotencySecretFrom(JSON.stringify(noKid), null)).toEqual({ kid: "key", d: a.d });
    for (const missing of [undefined, "", "  ", "not json", JSON.stringify({ kty: "OKP", crv: "Ed25519", x: a.x }), JSON.stringify({ keys: [] })])
      expect(idempotencySecretFrom(missing, null)).toHaveProperty("problem");
    // The reason never carries the secret's text.
    expect(JSON.stringify(idempotencySecretFrom(JSON.stringify({ kty: "RSA", d: "SECRET-D" }), null))).not.toContain("SECRET-D");
  });

  it("a rollback.step record keeps the key's SHA-256 and its signing key's id, never the key", () => {
    const view = { run: "run-1", team: "t", principal: "agent:a", started_at: "x", last_at: "x", steps: [] };
    const c: PlannedCompensation = {
      decision_id: "d1",
      seq: 1,
      upstream: "notes",
      step_tool: "create_note",
      tool: "delete_note",
      arguments: { id: "n1" },
      verification: null,
      needs_approval: false,
      key_id: null,
      retried: false,
    };
    const body = rollbackStepBody(view, c, "started", "human:o", "rb-1", { key: { value: "THE-KEY", kid: "k1" } });
    expect(body).toMatchObject({ idempotency_key_sha256: idempotencyKeyHash("THE-KEY"), idempotency_key_id: "k1" });
    expect(JSON.stringify(body)).not.toContain("THE-KEY");
    expect(rollbackStepBody(view, c, "skipped", "human:o", "rb-1")).toMatchObject({ idempotency_key_sha256: null, idempotency_key_id: null });
  });

  it("a read-back is verified when every expected path has its value (canonical equality)", () => {
    expect(verificationMet({ exists: false }, { id: "n1", exists: false })).toEqual({ ok: true });
    expect(verificationMet({ "note.tags": ["a", { b: 1, c: 2 }] }, { note: { tags: ["a", { c: 2, b: 1 }] } })).toEqual({ ok: true });
    expect(verificationMet({ exists: false }, { exists: true })).toEqual({ ok: false, reason: "exists is true, expected false" });
    expect(verificationMet({ title: "old" }, {})).toEqual({ ok: false, reason: 'title is absent, expected "old"' });
    expect(verificationMet({ x: 1 }, undefined)).toMatchObject({ ok: false });
  });
});

describe("a run from its ledger records", () => {
  const NOW = Date.parse("2026-12-01T10:00:00.000Z");
  const at = (s: number) => new Date(NOW - 60_000 + s * 1000).toISOString();
  const decision = (seq: number, id: string, tool: string, effect = "reversible", principal = "agent:a", run = "run-1"): RunEntry => ({
    kind: "decision",
    id,
    seq,
    at: at(seq),
    body: { principal, team: "t", run, upstream: "notes", tool, classification: { effect, blast_radius: "single", source: "mapping" } },
  });
  const outcome = (seq: number, decisionId: string, status: string, compensation?: object): RunEntry => ({
    kind: "outcome",
    id: `o${seq}`,
    seq,
    at: at(seq),
    body: (compensation ? { decision_id: decisionId, status, compensation } : { decision_id: decisionId, status }) as RunEntry["body"],
  });
  const planned = (id: string, approval = "none") => ({ v: 1, status: "planned", tool: "delete_note", arguments: { id }, approval, verification: null });
  const step = (seq: number, decisionId: string, state: string, extra: object = {}): RunEntry => ({
    kind: "rollback.step",
    id: `r${seq}`,
    seq,
    at: at(seq),
    body: { decision_id: decisionId, state, attempts: 1, verification: "verified", by: "human:o", ...extra } as never,
  });

  const entries: RunEntry[] = [
    outcome(2, "d1", "succeeded", planned("n1")),
    decision(1, "d1", "create_note"),
    decision(3, "d2", "create_note"),
    outcome(4, "d2", "succeeded", planned("n2", "required")),
    decision(5, "d3", "read_note", "read_only"),
    outcome(6, "d3", "succeeded"),
    decision(7, "d4", "create_draft"),
    outcome(8, "d4", "succeeded", { v: 1, status: "unavailable", reason: "the result broke the tool's outputSchema" }),
    decision(9, "d5", "delete_note", "irreversible"),
    outcome(10, "d5", "succeeded"),
    decision(11, "d6", "create_note"),
    outcome(12, "d6", "failed", { v: 1, status: "not_needed", reason: "the call failed" }),
    decision(13, "x1", "create_note", "reversible", "agent:other"),
    decision(14, "x2", "create_note", "reversible", "agent:a", "run-2"),
    decision(15, "d7", "create_note"),
    outcome(2, "d1", "succeeded", planned("n1")), // a duplicate seq: the same entry read twice (D1 and the tail)
  ];

  it("rebuilds the run's steps in order, with outcomes and recorded compensations; other principals and runs are not in it", () => {
    const view = runView("run-1", "agent:a", entries, NOW)!;
    expect(view.steps.map((s) => [s.decision_id, s.status])).toEqual([
      ["d1", "succeeded"],
      ["d2", "succeeded"],
      ["d3", "succeeded"],
      ["d4", "succeeded"],
      ["d5", "succeeded"],
      ["d6", "failed"],
      ["d7", "pending"],
    ]);
    expect(view.steps[0]!.compensation).toEqual(planned("n1"));
    expect(runView("run-1", "agent:nobody", entries, NOW)).toBeNull();
    // A decision with no outcome past the grace period is uncertain.
    expect(runView("run-1", "agent:a", entries, NOW + 16 * 60_000)!.steps.at(-1)!.status).toBe("uncertain");
  });

  it("plans newest first: approval marked, not reversible with why, nothing to undo for reads and failures", () => {
    const plan = planRollback(runView("run-1", "agent:a", entries, NOW)!);
    expect(plan.compensations.map((c) => [c.decision_id, c.arguments, c.needs_approval])).toEqual([
      ["d2", { id: "n2" }, true],
      ["d1", { id: "n1" }, false],
    ]);
    // The plan (which an agent may read) carries no key: it is derived only when the compensation runs.
    expect(plan.compensations.map((c) => c.key_id)).toEqual([null, null]);
    expect(JSON.stringify(plan)).not.toMatch(/idempotency_key/);
    expect(plan.not_reversible.map((n) => [n.decision_id, n.reason])).toEqual([
      ["d7", expect.stringMatching(/outcome is pending/)],
      ["d5", expect.stringMatching(/declares no compensation/)],
      ["d4", "the result broke the tool's outputSchema"],
    ]);
    expect(plan.nothing_to_undo.sort()).toEqual(["d3", "d6"]);
  });

  it("a compensated step stays compensated (a later record cannot undo that), a started or failed one is planned again with the same key", () => {
    const more = [
      ...entries,
      step(20, "d2", "started"),
      step(21, "d2", "compensated"),
      step(22, "d2", "failed"),
      step(23, "d1", "started", { idempotency_key_id: "k-old" }),
      step(24, "d1", "failed", { attempts: 3, idempotency_key_id: "k-new" }),
    ];
    const view = runView("run-1", "agent:a", more, NOW)!;
    expect(view.steps[1]!.rollback).toMatchObject({ state: "compensated", verification: "verified" });
    expect(view.steps[0]!.rollback).toMatchObject({ state: "failed", attempts: 3 });
    const plan = planRollback(view);
    expect(plan.already_compensated).toEqual(["d2"]);
    // A retry derives its key from the signing key the step's first execution used (so the key is the same).
    expect(plan.compensations.map((c) => [c.decision_id, c.retried, c.key_id])).toEqual([["d1", true, "k-old"]]);
  });

  it("a compensation naming a tool the upstream does not offer is not reversible", () => {
    const view = runView("run-1", "agent:a", entries, NOW)!;
    const plan = planRollback(view, () => new Set(["create_note", "read_note"]));
    expect(plan.compensations).toEqual([]);
    expect(plan.not_reversible.filter((n) => /offers no tool delete_note/.test(n.reason)).map((n) => n.decision_id)).toEqual(["d2", "d1"]);
  });
});
