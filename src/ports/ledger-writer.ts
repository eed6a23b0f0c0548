/**
 * The governed path's ledger: decision, outcome and blocked records — and one `tools.listed`
 * record per tools/list — appended to the caller's team chain in its LedgerDO, which makes them
 * durable before the append returns (the write-ahead point). Owns turning governance's records
 * into ledger bodies: arguments kept hashed until mappings say otherwise ([G]), results only as
 * a hash, the names (never the values) of the client's `portcullis/` `_meta` keys the forward
 * dropped, never a secret or a token — except, for a tool whose mapping declares a compensation,
 * the compensation resolved against the call (exactly the argument and result values its
 * references name, src/governance/compensation.ts), kept on the outcome so a run can be rolled back
 * from the ledger alone. A call's W3C trace ids go on its decision (`trace`), outcome and blocked
 * (`trace_id`) records, and each decision or refusal, once recorded, prints one structured log line
 * (`"event":"decision"`) with the trace id and the record's place in its chain — never the
 * arguments unless the mapping keeps them in full. Every append is bounded (LEDGER_WRITE_TIMEOUT_MS), and a call's refusal
 * stays within one bound: the blocked record of a refusal caused by this ledger not answering is
 * not attempted while it has just timed out (it would wait a second bound on the same ledger).
 * Must never: report a receipt for a record that was not stored, or swallow a failed
 * decision/outcome append (the governed path refuses on a throw).
 */
import { deployedConfigText } from "../config/deployed.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { ledgerObject } from "../../durable-objects/object-names.ts";
import { GLOBAL_CHAIN } from "../ledger/records.ts";
import type { LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import type { OutcomeRecord, Receipt, ToolCall } from "../governance/steps.ts";
import { canonicalHash, sha256Hex } from "../wire/canonical.ts";
import type { BlockedBody, ConfigChangedBody, DecisionBody, EntryDraft, EntryKind, OutcomeBody, RoundBody } from "../ledger/records.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import type { CallLedger, FrontContext } from "../protocol/call-context.ts";
import { policyEngine } from "../governance/engine.ts";
import { batchedAppend, LedgerLate } from "./ledger-batch.ts";
import type { CompensationSpec } from "../config/mapping-schema.ts";
import { compensationFor } from "../governance/compensation.ts";
import { bounded } from "../wire/bounded.ts";
import type { MeteredDraft } from "../ledger/metrics.ts";
import { writeCallPoint } from "./ledger-analytics.ts";

const policyVersion = (cfg: GatewayConfig): string => {
  try {
    return policyEngine(cfg).version;
  } catch {
    return "uncompiled";
  }
};

/** How this gateway's LedgerDOs sign checkpoints: its signing key secret and its canonical URL (one place for every writer). */
export function ledgerSigning(cfg: GatewayConfig): LedgerSigning {
  return { secret: cfg.auth.signingKeySecret, gateway: canonicalUrl(cfg) };
}

/** Where and how a caller's records are written. */
export interface LedgerTarget {
  env: Env;
  principal: Principal;
  signing: LedgerSigning;
  waitUntil(p: Promise<unknown>): void;
  /** The mapped compensation of an upstream's tool, if any (its outcome then keeps the resolved compensation). */
  compensationOf?(upstream: string, tool: string): CompensationSpec | undefined;
}

const draft = (kind: EntryKind, body: JsonObject, id: string = crypto.randomUUID()): EntryDraft => ({ kind, id, at: new Date().toISOString(), body });

/** One structured line per recorded decision or refusal (Workers Logs, `wrangler tail`, an OpenTelemetry logs destination). */
function logDecision(fields: JsonObject): void {
  console.log(JSON.stringify({ event: "decision", ...fields }));
}

/** A ledger that does not answer within this bound counts as failed (the call is refused or its result held back). */
export const LEDGER_WRITE_TIMEOUT_MS = 5000;

async function append(env: Env, team: string, signing: LedgerSigning, d: EntryDraft, decisionId: string): Promise<Receipt> {
  // Through this isolate's group commit for the chain (ledger-batch.ts), which bounds the wait.
  const [entry] = await batchedAppend(env, team, signing, [d], LEDGER_WRITE_TIMEOUT_MS);
  if (!entry || entry.id !== d.id || entry.kind !== d.kind) throw new Error("the ledger did not confirm the record");
  return { chain: entry.chain, seq: entry.seq, hash: entry.hash, decision_id: decisionId };
}

const LEDGER_LATE = `the ledger did not answer within ${LEDGER_WRITE_TIMEOUT_MS} ms`;

/** The ledger of one caller's requests. */
export function callLedger(t: LedgerTarget): CallLedger {
  const p = t.principal;
  // When an append of this ledger last ran out of time (null: none did since the last one it took).
  let lateAt: number | null = null;
  const write = async (d: EntryDraft, decisionId: string): Promise<Receipt> => {
    try {
      const receipt = await append(t.env, p.team, t.signing, d, decisionId);
      lateAt = null;
      return receipt;
    } catch (e) {
      if (e instanceof LedgerLate) lateAt = Date.now();
      throw e;
    }
  };
  // Decisions of compensable tools, until their outcome: the spec and the arguments it resolves against (never written).
  const compensable = new Map<string, { spec: CompensationSpec; args: JsonObject | undefined }>();
  return {
    async decision(r) {
      const id = crypto.randomUUID();
      const body: DecisionBody = {
        principal: r.principal,
        team: r.team,
        run: r.runId,
        upstream: r.upstream,
        tool: r.tool,
        exposed: r.exposed,
        // As the mapping says: the canonical value (full), its hash (hashed, the default) or nothing (redacted).
        arguments:
          r.arguments === undefined || r.argumentsKept === "redacted"
            ? null
            : r.argumentsKept === "full"
              ? r.arguments
              : { sha256: canonicalHash(r.arguments) },
        arguments_mode: r.arguments === undefined ? "redacted" : r.argumentsKept,
        classification: { effect: r.classification.effect, blast_radius: r.classification.blastRadius, source: r.classification.source },
        decision: r.decision.decision,
        rule: r.decision.rule,
        reason: r.decision.reason,
        mode: r.decision.mode,
        policy_version: r.decision.policyVersion,
        obligations: r.decision.obligations.map((o) => o.spec),
        hold_id: r.holdId ?? null,
        // observe / advise (or a shadowing rule): what enforce would have done.
        would_block: r.decision.wouldBlock ? { ...r.decision.wouldBlock } : null,
        unverified_read: r.decision.unverifiedRead === true,
      };
      // The client's `portcullis/` `_meta` keys the forward dropped: names only (present only when any were).
      if (r.strippedMeta?.length) body.stripped_meta = [...r.strippedMeta];
      if (r.trace) body.trace = { trace_id: r.trace.traceId, span_id: r.trace.spanId, parent_span_id: r.trace.parentSpanId };
      const spec = t.compensationOf?.(r.upstream, r.tool);
      const receipt = await write(draft("decision", body, id), id);
      if (spec) compensable.set(id, { spec, args: r.arguments });
      logDecision({
        trace_id: r.trace?.traceId ?? null,
        decision_id: id,
        chain: receipt.chain,
        seq: receipt.seq,
        principal: r.principal,
        team: r.team,
        run: r.runId,
        upstream: r.upstream,
        tool: r.tool,
        exposed: r.exposed,
        decision: body.decision,
        mode: body.mode,
        rule: body.rule,
        ...(body.would_block ? { would_block: body.would_block } : {}),
        ...(r.holdId ? { hold_id: r.holdId } : {}),
        ...(r.argumentsKept === "full" && r.arguments !== undefined ? { arguments: r.arguments } : {}),
      });
      return receipt;
    },
    async round(r) {
      const body: RoundBody = {
        decision_id: r.decision?.decision_id ?? null,
        principal: p.sub,
        team: p.team,
        round: r.round,
        asks: r.asks,
        answered: r.answered,
      };
      if (r.traceId) body.trace_id = r.traceId;
      const d = draft("call.round", body);
      return write(d, r.decision?.decision_id ?? "");
    },
    async outcome(r) {
      const body = outcomeBody(r);
      const pending = r.decision ? compensable.get(r.decision.decision_id) : undefined;
      if (pending && r.decision) {
        compensable.delete(r.decision.decision_id);
        body.compensation = compensationFor(pending.spec, pending.args, r.status, r.answer?.result ?? null, r.outputProblems ?? []) as unknown as JsonObject;
      }
      const d: MeteredDraft = draft("outcome", body);
      // Beside the draft, for the LedgerDO's rollups only (src/ledger/metrics.ts): never part of the record.
      const metrics = outcomeMetrics(r);
      if (metrics) d.metrics = metrics;
      const receipt = await write(d, r.decision?.decision_id ?? "");
      writeCallPoint(t.env, {
        team: p.team,
        kind: "outcome",
        upstream: r.metrics?.upstream ?? "",
        tool: r.metrics?.tool ?? "",
        status: r.status,
        principal: p.sub,
        ...(r.traceId ? { traceId: r.traceId } : {}),
        upstreamMs: r.durationMs,
        ...(r.metrics?.gatewayMs !== undefined ? { gatewayMs: r.metrics.gatewayMs } : {}),
      });
      return receipt;
    },
    async blocked(call: ToolCall, refusal) {
      // A refusal because this ledger did not answer, while it has just not answered: refused at once,
      // so the call is answered within one write bound (the governed path answers without the record).
      if (lateAt !== null && Date.now() - lateAt < LEDGER_WRITE_TIMEOUT_MS && refusal.cause instanceof LedgerLate)
        throw new Error(`${LEDGER_LATE} a moment ago; the blocked record was not attempted`);
      const body: BlockedBody = {
        principal: p.sub,
        team: p.team,
        run: call.runId,
        tool: call.exposedName,
        check: refusal.check,
        reason: refusal.reason,
        rule: refusal.rule ?? null,
      };
      if (call.trace) body.trace_id = call.trace.traceId;
      const d = draft("blocked", body);
      const receipt = await write(d, d.id);
      writeCallPoint(t.env, {
        team: p.team,
        kind: "blocked",
        upstream: "",
        tool: call.exposedName,
        status: refusal.check,
        principal: p.sub,
        ...(call.trace ? { traceId: call.trace.traceId } : {}),
      });
      logDecision({
        trace_id: call.trace?.traceId ?? null,
        blocked_id: d.id,
        chain: receipt.chain,
        seq: receipt.seq,
        principal: p.sub,
        team: p.team,
        run: call.runId,
        exposed: call.exposedName,
        decision: "blocked",
        check: refusal.check,
        rule: body.rule,
      });
      return d.id;
    },
    async hold(kind, body) {
      const d = draft(kind, body);
      await write(d, d.id);
      return d.id;
    },
    unmatched(id, body) {
      const d = draft("policy.unmatched", { principal: p.sub, team: p.team, ...body }, id);
      t.waitUntil(
        batchedAppend(t.env, p.team, t.signing, [d], LEDGER_WRITE_TIMEOUT_MS).catch((e) =>
          console.error("portcullis: policy.unmatched record not written", String(e)),
        ),
      );
    },
    listed(shown, hidden) {
      const d = draft("tools.listed", { principal: p.sub, team: p.team, shown, hidden });
      t.waitUntil(
        batchedAppend(t.env, p.team, t.signing, [d], LEDGER_WRITE_TIMEOUT_MS).catch((e) =>
          console.error("portcullis: tools.listed record not written", String(e)),
        ),
      );
    },
  };
}

/** An outcome record's body (the result only as its hash). */
export function outcomeBody(r: OutcomeRecord): OutcomeBody {
  const answer = r.answer ? (r.answer.error ? { error: r.answer.error } : { result: r.answer.result ?? {} }) : null;
  const body: OutcomeBody = {
    decision_id: r.decision?.decision_id ?? null,
    status: r.status,
    result_hash: answer ? canonicalHash(answer) : null,
    duration_ms: r.durationMs,
    obligations_applied: r.obligationsApplied,
    output_problems: r.outputProblems ?? [],
    reason: r.reason ?? null,
  };
  if (r.traceId) body.trace_id = r.traceId;
  return body;
}

/** What the LedgerDO's rollups read beside an outcome draft (never part of the record). */
export function outcomeMetrics(r: OutcomeRecord): MeteredDraft["metrics"] | undefined {
  if (!r.metrics) return undefined;
  return { upstream: r.metrics.upstream, tool: r.metrics.tool, ...(r.metrics.gatewayMs !== undefined ? { gateway_ms: r.metrics.gatewayMs } : {}) };
}

/** An administrative record (grant minted or revoked, config or mode changed) on a team's chain; durable when it resolves. */
export async function appendRecord(env: Env, signing: LedgerSigning, team: string, kind: EntryKind, body: JsonObject): Promise<Receipt> {
  const d = draft(kind, body);
  return append(env, team, signing, d, d.id);
}

/** The ledger of a front's caller. */
export function frontLedger(fc: FrontContext): CallLedger {
  const mappings = fc.cfg.mappings;
  return callLedger({
    env: fc.env,
    principal: fc.principal,
    signing: { secret: fc.cfg.auth.signingKeySecret, gateway: fc.gateway },
    waitUntil: fc.waitUntil,
    compensationOf: (upstream, tool) => mappings[upstream]?.[tool]?.compensation,
  });
}

const recordedConfigs = new WeakSet<object>();

/**
 * The first time an isolate serves a config, a `config.changed` record on the global chain names
 * it by the SHA-256 of its text (never the text: it may hold secrets); the id is that hash, so
 * every isolate's record of one config is one entry.
 */
export function recordConfigOnce(env: Env, cfg: GatewayConfig, gateway: string, waitUntil: (p: Promise<unknown>) => void): void {
  if (recordedConfigs.has(cfg)) return;
  recordedConfigs.add(cfg);
  const text = deployedConfigText(env) ?? "";
  const sha = sha256Hex(text);
  const d: EntryDraft = {
    kind: "config.changed",
    id: `config:${sha}`,
    at: new Date().toISOString(),
    body: {
      what: "config",
      from: null,
      to: sha,
      by: "deploy",
      upstreams: cfg.upstreams.map((u) => u.name),
      auth_required: cfg.auth.required,
      // The governance a deploy puts in force: its mode and policy version are on the record with it.
      mode: cfg.mode,
      policy_version: policyVersion(cfg),
      mapped_upstreams: Object.keys(cfg.mappings).filter((u) => Object.keys(cfg.mappings[u] ?? {}).length > 0),
    } satisfies ConfigChangedBody,
  };
  const global = ledgerObject(env, GLOBAL_CHAIN);
  if (!global) return;
  waitUntil(
    bounded(global.append([d], { secret: cfg.auth.signingKeySecret, gateway }), LEDGER_WRITE_TIMEOUT_MS).catch((e) => {
      recordedConfigs.delete(cfg); // try again on a later request
      console.error("portcullis: config.changed record not written", String(e));
    }),
  );
}
