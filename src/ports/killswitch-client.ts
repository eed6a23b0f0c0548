/**
 * The kill switch as the gateway reads and changes it — the per-isolate reader (KillSwitchDO
 * state cached for at most one second; unreadable → throws, so the governed path refuses), the
 * in-flight watch that cancels a running call upstream when a halt covers it, and the
 * status/halt/resume operations the API, operator tools, console and CLI share (a change is
 * checked first by killSwitchChangeProblem, durable-objects/contract-killswitch.ts). Must never:
 * report an unknown state as "not halted", or cache state longer than one second.
 *
 * Decision: a change does not refresh this isolate's cache. Every isolate, the admin's included,
 * sees a halt within the same bound (≤ 1 s), so what the e2e test measures is the bound every
 * isolate keeps, not a shortcut only the isolate that served the halt would take.
 * Decision: a kill switch that cannot be read while a call is already running does not cancel
 * it (the call was admitted under a state that was read); only a halt that is read does.
 */
import { ledgerSigning } from "./ledger-writer.ts";
import { killSwitchObject } from "../../durable-objects/object-names.ts";
import { type HaltRecord, type HaltScopeName, type KillSwitchSnapshot, killSwitchChangeProblem } from "../../durable-objects/contract-killswitch.ts";
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import { type Principal, principalHas } from "../config/principal.ts";
import type { Env } from "../env.ts";
import { type Halt, haltFor, type KillSwitchReader, type KillSwitchState } from "../governance/halts.ts";
import type { LegResult, Refusal, ToolCall } from "../governance/steps.ts";
import type { CallContext } from "../protocol/call-context.ts";
import { postUpstream } from "../upstream/client.ts";
import { bounded } from "../wire/bounded.ts";

/** Longest an isolate serves a kill-switch state it read (ms). */
export const KILLSWITCH_MAX_AGE_MS = 1000;
/** How often a running governed call re-reads the kill switch (ms; through the reader, so ≤ 1 s stale). */
export const KILLSWITCH_POLL_MS = 250;
/** A kill switch that does not answer within this bound counts as unreadable. */
export const KILLSWITCH_READ_TIMEOUT_MS = 5000;

/** A snapshot as the governed path reads it (HaltRecord → Halt: a null target is absent); a malformed one throws. */
export function stateOf(s: KillSwitchSnapshot): KillSwitchState {
  if (!s || typeof s.version !== "number" || !Array.isArray(s.halts)) throw new Error("the kill switch answered something that is not a state");
  return {
    version: s.version,
    halts: s.halts.map(
      (h: HaltRecord): Halt => (h.target === null ? { scope: h.scope, reason: h.reason } : { scope: h.scope, target: h.target, reason: h.reason }),
    ),
  };
}

/**
 * A reader over `load` that serves one read for at most `maxAgeMs`, counted from when that read
 * started (so a halt committed before a read began is seen by every call once `maxAgeMs` has
 * passed). A caller that finds no fresh state reads for itself: no read in flight is shared,
 * because Workers cancels the continuations of a promise whose request has ended, and a request
 * that awaited another request's read (a finished call's kill-switch poll, say) would never get
 * an answer. The newest read to land is kept. A failed read throws to its caller and is not kept.
 * `now` is the clock (tests drive it).
 */
export function cachedKillSwitchReader(
  load: () => Promise<KillSwitchSnapshot>,
  now: () => number = Date.now,
  maxAgeMs = KILLSWITCH_MAX_AGE_MS,
): KillSwitchReader {
  let fresh: { startedAt: number; state: KillSwitchState } | null = null;
  return {
    async read(): Promise<KillSwitchState> {
      const t = now();
      if (fresh && t - fresh.startedAt < maxAgeMs && t >= fresh.startedAt) return fresh.state;
      const startedAt = t;
      const state = stateOf(await bounded(load(), KILLSWITCH_READ_TIMEOUT_MS, "the kill switch"));
      if (!fresh || fresh.startedAt <= startedAt) fresh = { startedAt, state };
      return state;
    },
  };
}

/** The isolate's one cache; each reader loads through the env it was made with. */
let isolateLoad: (() => Promise<KillSwitchSnapshot>) | null = null;
const isolateReader = cachedKillSwitchReader(() => {
  if (!isolateLoad) return Promise.reject(new Error("no kill switch binding"));
  return isolateLoad();
});

/** The isolate's reader of the kill switch (≤ 1 s stale). */
export function killSwitchReader(env: Env): KillSwitchReader {
  return {
    read: () => {
      isolateLoad = () => killSwitchObject(env).state();
      return isolateReader.read();
    },
  };
}

/** The halt covering `call` now, or null; an unreadable kill switch is reported as such (`unreadable`). */
async function haltNow(reader: KillSwitchReader, call: ToolCall, up: UpstreamConfig, ownTool?: string): Promise<Refusal | null | { unreadable: string }> {
  try {
    return haltFor(await reader.read(), call, up, ownTool);
  } catch (e) {
    return { unreadable: (e as Error)?.message ?? String(e) };
  }
}

/**
 * Runs one governed upstream leg so that a halt covering `call` while it runs cancels it: the
 * request is aborted, a legacy upstream gets `notifications/cancelled` for it, and the leg
 * reports `uncertain` with a reason naming the halt. `run` is handed the context to send with.
 */
export async function haltableLeg(
  ctx: CallContext,
  reader: KillSwitchReader,
  call: ToolCall,
  up: UpstreamConfig,
  run: (ctx: CallContext) => Promise<LegResult>,
  ownTool?: string,
): Promise<LegResult> {
  // A halt that landed after step 5 (or before a retry) stops the leg before anything is sent.
  const before = await haltNow(reader, call, up, ownTool);
  if (before && "unreadable" in before)
    return { kind: "failed", reason: `the kill switch could not answer (${before.unreadable}); the call was not sent`, auth: false };
  if (before) return { kind: "uncertain", reason: `cancelled by the kill switch before it was sent: ${before.reason}` };

  const halt = new AbortController();
  let upstreamId: string | undefined;
  const derived: CallContext = {
    ...ctx,
    signal: AbortSignal.any([ctx.signal, halt.signal]),
    legs: {
      ...ctx.legs,
      recordRequest: (id, u, upId) => {
        if (u.name === up.name) upstreamId = upId;
        return ctx.legs.recordRequest(id, u, upId);
      },
    },
  };
  let settled = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const halted = new Promise<Refusal>((resolve) => {
    const tick = async () => {
      timer = undefined;
      if (settled) return;
      const h = await haltNow(reader, call, up, ownTool);
      if (settled) return;
      if (h && !("unreadable" in h)) return resolve(h);
      timer = setTimeout(tick, KILLSWITCH_POLL_MS);
    };
    timer = setTimeout(tick, KILLSWITCH_POLL_MS);
  });
  const leg = run(derived);
  try {
    const first = await Promise.race([leg.then((r) => ({ leg: r })), halted.then((h) => ({ halt: h }))]);
    if ("leg" in first) return first.leg;
    settled = true;
    halt.abort(new Error(`cancelled by the kill switch: ${first.halt.reason}`));
    leg.catch(() => undefined);
    const reason = `cancelled by the kill switch: ${first.halt.reason}`;
    // 2025-11-25 upstreams hear of it by notifications/cancelled under the id they got; for a
    // 2026-07-28 upstream, closing the request's stream (the abort) is the cancellation.
    const legNow = await ctx.legs.leg(up).catch(() => null);
    if (legNow?.era === "legacy" && upstreamId !== undefined) {
      await postUpstream(up, legNow, { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: upstreamId, reason } }).catch(() => undefined);
    }
    return { kind: "uncertain", reason };
  } finally {
    settled = true;
    if (timer !== undefined) clearTimeout(timer);
  }
}

export type KillSwitchResult = { ok: true; changed: boolean; snapshot: KillSwitchSnapshot } | { ok: false; status: 400 | 403 | 503; message: string };

/** The kill switch as it is now (never "unknown": unreadable → ok:false, 503). */
export async function killSwitchStatus(env: Env): Promise<KillSwitchResult> {
  try {
    const snapshot = await bounded(killSwitchObject(env).state(), KILLSWITCH_READ_TIMEOUT_MS, "the kill switch");
    stateOf(snapshot);
    return { ok: true, changed: false, snapshot };
  } catch (e) {
    return {
      ok: false,
      status: 503,
      message: `the kill switch could not be read (${(e as Error)?.message ?? String(e)}); its state is not known, so governed calls are refused`,
    };
  }
}

/** Halts or resumes a scope as `by` (an admin, from its verified token); recorded on the ledger before it answers ok. */
export async function changeKillSwitch(
  env: Env,
  cfg: GatewayConfig,
  by: Principal,
  action: "halt" | "resume",
  scope: HaltScopeName,
  target: string | null,
  reason: string,
): Promise<KillSwitchResult> {
  if (!by.authenticated || !principalHas(by, "admin"))
    return { ok: false, status: 403, message: `only an admin may ${action} the kill switch; ${by.sub} is not one` };
  const problem = killSwitchChangeProblem(scope, target, reason);
  if (problem) return { ok: false, status: 400, message: problem };
  const t = scope === "global" ? null : target;
  let signing: { secret: string; gateway: string };
  try {
    signing = ledgerSigning(cfg);
  } catch (e) {
    return { ok: false, status: 503, message: `the kill switch cannot record a change: ${(e as Error).message}` };
  }
  try {
    const ks = killSwitchObject(env);
    const out = await (action === "halt" ? ks.halt(scope, t, reason, by.sub, signing) : ks.resume(scope, t, reason, by.sub, signing));
    if (!out.ok) return { ok: false, status: 503, message: out.message };
    return { ok: true, changed: out.changed, snapshot: out.snapshot };
  } catch (e) {
    return {
      ok: false,
      status: 503,
      message: `the kill switch could not be reached (${(e as Error)?.message ?? String(e)}); read GET /v1/killswitch to see whether the change was made`,
    };
  }
}
