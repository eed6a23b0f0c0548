/**
 * The governed path's hold step over the caller's team HoldsDO: the exact canonical action
 * (RFC 8785 JSON of principal, upstream, tool, arguments) and its hash, the claim that consumes
 * an approved hold once, the `hold.created` / `hold.consumed` records (durable before the agent
 * hears of the hold, and before the consumed call goes on to its write-ahead), and the three ways
 * a held call waits: the universal isError answer naming the hold, its expiry and its console
 * page; with `holds.wait` > 0 the call stays open (progress notifications when the client sent a
 * progress token, SSE keep-alive comments otherwise, and for a resumable legacy stream SEP-1699
 * close-and-resume) and runs in the same call if approved in time; and, for a client that can take
 * one, a task standing for the held call (src/ports/hold-tasks.ts answers its tasks/* requests).
 * Every round trip to the HoldsDO is bounded (HOLD_STORE_TIMEOUT_MS, src/wire/bounded.ts), and a
 * claim that is not one the gateway knows is an error: both reject, and the governed path refuses
 * the call readably at the hold step (fail closed).
 * Must never: let a call proceed without a `consumed` claim, take a hold of another principal's
 * action (the hash covers the principal), keep a call open longer than `holds.wait` (plus one
 * store bound), or wait on the HoldsDO without a bound.
 */
import { ledgerSigning } from "./ledger-writer.ts";
import type { HoldClaim, HoldRecord, HoldsApi, NewHold } from "../../durable-objects/contract-holds.ts";
import type { LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import { newHoldId } from "../../durable-objects/object-names.ts";
import type { Classification, Decision, HoldStore, HoldVerdict, Refusal, Target, ToolCall } from "../governance/steps.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { type HoldBody, holdBody } from "../ledger/records.ts";
import { canonicalJson, sha256Hex } from "../wire/canonical.ts";
import { type JsonObject, type JsonRpcResponse, isObject } from "../wire/jsonrpc.ts";
import { bounded } from "../wire/bounded.ts";
import type { CallContext } from "../protocol/call-context.ts";
import { TASKS_EXTENSION } from "../protocol/extensions.ts";
import { META } from "../protocol/versions.ts";
import { holdTaskCreated } from "./hold-tasks.ts";

/** The canonical action of a call and its hash: what an approval binds (DESIGN invariant 5). */
export function canonicalAction(principal: string, upstream: string, tool: string, args: JsonObject | undefined): { action: string; hash: string } {
  const action = canonicalJson({ principal, upstream, tool, arguments: args ?? {} });
  return { action, hash: sha256Hex(action) };
}

/** The console page of a hold. */
export function holdUrl(ctx: Pick<CallContext, "cfg">, id: string): string {
  return `${canonicalUrl(ctx.cfg)}/console/holds/${encodeURIComponent(id)}`;
}

/** Whether the client can take a task for this call: a legacy client that asked for one (`params.task`), a modern one that declared the tasks extension. */
export function wantsTask(call: ToolCall): boolean {
  const params = call.request.params;
  if (call.era === "legacy") return isObject(params?.task);
  const meta = isObject(params?._meta) ? params._meta : {};
  const caps = meta[META.clientCapabilities];
  return isObject(caps) && isObject(caps.extensions) && caps.extensions[TASKS_EXTENSION] !== undefined;
}

const WAIT_SLICE_MS = 10_000;

/** A HoldsDO that does not answer within this bound counts as failed (like the ledger's write bound): the call is refused at the hold step. */
export const HOLD_STORE_TIMEOUT_MS = 5000;
const HOLD_STORE = "the hold store";

const CLAIM_KINDS = new Set<string>(["created", "pending", "consumed", "replay", "in_flight", "rejected"]);

/** The HoldsDO's claim, bounded, and checked to be one the gateway knows (anything else rejects: fail closed). */
async function claimOf(api: HoldsApi, fresh: NewHold, signing: LedgerSigning, now: number): Promise<HoldClaim> {
  const claim: unknown = await bounded(api.claim(fresh, signing, now), HOLD_STORE_TIMEOUT_MS, HOLD_STORE);
  const kind = isObject(claim) ? claim.kind : undefined;
  if (!isObject(claim) || typeof kind !== "string" || !CLAIM_KINDS.has(kind) || !isObject(claim.hold)) {
    const shown = typeof kind === "string" ? `"${kind.slice(0, 40)}"` : "none";
    throw new Error(`${HOLD_STORE} answered something that is not a hold claim (kind: ${shown})`);
  }
  return claim as unknown as HoldClaim;
}

export function holdStore(ctx: CallContext, api: HoldsApi): HoldStore {
  const signing = ledgerSigning(ctx.cfg);
  const body = (h: HoldRecord, reason: string | null): HoldBody => holdBody(h, null, reason);

  return {
    async settle(call: ToolCall, target: Target, decision: Decision, classification: Classification): Promise<HoldVerdict> {
      const now = Date.now();
      const p = call.principal;
      const { action, hash } = canonicalAction(p.sub, target.upstream.name, target.tool.name, call.arguments);
      const fresh: NewHold = {
        id: newHoldId(p.team),
        team: p.team,
        actionHash: hash,
        action,
        principal: p.sub,
        jti: p.jti ?? null,
        upstream: target.upstream.name,
        tool: target.tool.name,
        exposedName: call.exposedName,
        rule: decision.rule,
        reason: decision.reason,
        classification: { effect: classification.effect, blast_radius: classification.blastRadius, source: classification.source },
        createdAt: now,
        expiresAt: now + ctx.cfg.holds.expiresMs,
      };
      let claim = await claimOf(api, fresh, signing, now);
      let recorded: string | undefined;
      if (claim.kind === "created") {
        // The hold is on the record before the agent (or an approver) hears of it.
        recorded = await ctx.stores.ledger.hold("hold.created", body(claim.hold, decision.reason));
        ctx.stores.holdCreated?.(claim.hold);
      }
      if (claim.kind === "created" || claim.kind === "pending") {
        if (wantsTask(call)) return { proceed: false, answer: holdTaskCreated(call, claim.hold), holdId: claim.hold.id };
        if (ctx.cfg.holds.waitMs > 0) {
          claim = await waitForApprover(ctx, api, call, claim.hold, fresh, signing, now + ctx.cfg.holds.waitMs);
          // The hold expired while the call waited: the claim stored a new one, on the record like any other.
          if (claim.kind === "created") recorded = await ctx.stores.ledger.hold("hold.created", body(claim.hold, decision.reason));
        }
      }
      return verdictOf(ctx, claim, recorded, (h) => ctx.stores.ledger.hold("hold.consumed", body(h, null)));
    },
    async complete(holdId: string, answer: JsonRpcResponse): Promise<void> {
      await bounded(api.complete(holdId, answer, Date.now()), HOLD_STORE_TIMEOUT_MS, HOLD_STORE);
    },
    async release(holdId: string, reason: string): Promise<void> {
      await bounded(api.release(holdId, reason, Date.now()), HOLD_STORE_TIMEOUT_MS, HOLD_STORE);
    },
  };
}

/** What the governed path does with a claim: run (consumed, on the record first), replay, or refuse readably. */
async function verdictOf(ctx: CallContext, claim: HoldClaim, recorded: string | undefined, consumed: (h: HoldRecord) => Promise<string>): Promise<HoldVerdict> {
  const h = claim.hold;
  const refuse = (reason: string): HoldVerdict => {
    const refusal: Refusal = { check: "hold", reason, rule: h.rule };
    return { proceed: false, refusal, holdId: h.id, ...(recorded ? { recorded } : {}) };
  };
  switch (claim.kind) {
    case "consumed":
      await consumed(h);
      return { proceed: true, holdId: h.id };
    case "replay":
      if (h.result) return { proceed: false, answer: h.result, holdId: h.id };
      return refuse(`the approved call of hold ${h.id} is running now; retry the identical call to get its answer`);
    case "in_flight":
      return refuse(`the approved call of hold ${h.id} is running now (it runs once); retry the identical call to get its answer`);
    case "rejected":
      return refuse(`hold ${h.id} was rejected by ${h.approver ?? "an approver"}: ${h.resolveReason ?? "no reason given"}`);
    case "created":
    case "pending": {
      const expires = new Date(h.expiresAt).toISOString();
      const again = h.notForwarded ? " (it was approved once but could not be recorded, so it did not run; it needs approval again)" : "";
      return refuse(
        `this call needs approval (${h.reason}). It is held as ${h.id} until ${expires}${again}; an approver can decide at ${holdUrl(ctx, h.id)}. Retry the identical call after approval: it runs once`,
      );
    }
    default:
      // claimOf lets no other kind through; should one arrive anyway, the call is refused, never run.
      throw new Error(`${HOLD_STORE} answered a claim of unknown kind (${String((claim as { kind?: unknown }).kind).slice(0, 40)})`);
  }
}

/**
 * `holds.wait`: the call stays open until the hold leaves pending or the deadline passes — a
 * progress notification (with the client's token) or an SSE keep-alive every slice, and for a
 * resumable legacy stream the SEP-1699 close (the client resumes with GET + Last-Event-ID and
 * gets the answer from the session's buffer). Then the action is claimed again.
 */
async function waitForApprover(
  ctx: CallContext,
  api: HoldsApi,
  call: ToolCall,
  hold: HoldRecord,
  fresh: NewHold,
  signing: LedgerSigning,
  deadline: number,
): Promise<HoldClaim> {
  const meta = isObject(call.request.params?._meta) ? call.request.params._meta : {};
  const token = typeof meta.progressToken === "string" || typeof meta.progressToken === "number" ? meta.progressToken : null;
  const started = Date.now();
  let closed = false;
  while (Date.now() < deadline && !ctx.signal.aborted) {
    if (token !== null) {
      await ctx.relay.send({
        jsonrpc: "2.0",
        method: "notifications/progress",
        params: {
          progressToken: token,
          progress: Math.round((Date.now() - started) / 1000),
          message: `waiting for an approver: hold ${hold.id} (${holdUrl(ctx, hold.id)})`,
        },
      });
    } else await ctx.relay.keepAlive?.();
    if (!closed && ctx.era === "legacy" && ctx.relay.mirrorClose) {
      closed = true;
      await ctx.relay.mirrorClose();
    }
    const slice = Math.max(1, Math.min(WAIT_SLICE_MS, deadline - Date.now()));
    // The object answers when the hold changes or the slice ends; one store bound more, then it failed.
    const seen = await bounded(api.awaitChange(hold.id, slice), slice + HOLD_STORE_TIMEOUT_MS, HOLD_STORE);
    if (seen?.state !== "pending") break;
  }
  // Claimed again as a new hold (id and expiry) in case the first expired meanwhile; a live one is found by its action.
  const now = Date.now();
  return claimOf(api, { ...fresh, id: newHoldId(fresh.team), createdAt: now, expiresAt: now + ctx.cfg.holds.expiresMs }, signing, now);
}
