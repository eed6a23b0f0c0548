/**
 * RoundsDO: one parked upstream call of a 2026-07-28 client on a 2025-11-25 upstream, named
 * `round:<id>` (durable-objects/object-names.ts roundObject). The round's requests land on any
 * isolate, but the upstream's POST stream must stay open between them, so the call lives here:
 * `begin` sends it upstream and reads to its first step, each `resume` delivers the client's
 * answers and reads to the next (rounds.ts ParkedCall does the reading). Owns, in memory only:
 * the owner (principal `sub` and the call's binding digest), the round number a resume must
 * name, the parked call, its bound (the upstream's timeout, by alarm) and what to record if the
 * client never comes back. Stores nothing durable: an evicted object is an ended round.
 * Must never: resume for anyone but the owner, accept a round number twice, or outlive the bound
 * without cancelling the upstream request (and recording the governed call's uncertain outcome).
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import { ledgerObject } from "../../durable-objects/object-names.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { postUpstream, requestUpstream } from "./client.ts";
import { ParkedCall, type RoundBegin, type RoundExpiry, type RoundReply, type RoundsApi } from "./rounds.ts";

/** Time past the upstream's own bound before the object gives the call up (its read fails first). */
const GRACE_MS = 2000;

interface Held {
  owner: string;
  digest: string;
  n: number;
  call: ParkedCall;
  begin: RoundBegin;
  abort: AbortController;
  expiry?: RoundExpiry;
  /** A governed call's state for its next round (governance/call.ts), opaque here. */
  state?: JsonObject;
  /** One resume at a time: a second for the same round waits, then finds the number taken. */
  busy: Promise<unknown>;
}

export class RoundsDO extends DurableObject<Env> implements RoundsApi {
  private held: Held | null = null;
  private ended = false;

  async begin(b: RoundBegin): Promise<RoundReply> {
    if (this.held || this.ended) return { kind: "failed", reason: "this round was begun before", uncertain: false, auth: false, interim: [], n: 0 };
    const abort = new AbortController();
    const frames = requestUpstream(b.up, b.leg, b.request, { signal: abort.signal, ...(b.trace ? { trace: b.trace } : {}) });
    const call = new ParkedCall({ frames, post: (m) => postUpstream(b.up, b.leg, m) }, b.declared, String(b.request.id), { ...(b.given ?? {}) });
    this.held = { owner: b.owner, digest: b.digest, n: 1, call, begin: b, abort, busy: Promise.resolve() };
    await this.ctx.storage.setAlarm(Date.now() + b.up.timeoutMs + GRACE_MS);
    return this.step(this.held);
  }

  async resume(owner: string, digest: string, n: number, responses: JsonObject, declared: JsonObject): Promise<RoundReply | { kind: "gone"; reason: string }> {
    const h = this.held;
    if (!h || h.owner !== owner || h.digest !== digest) return { kind: "gone", reason: "this input round has ended, or was never this call's" };
    const turn = h.busy.then(async () => {
      if (this.held !== h || h.n !== n) return { kind: "gone" as const, reason: "this input round was answered already (its requestState is spent)" };
      h.n++;
      await h.call.answer(responses, declared);
      return this.step(h);
    });
    h.busy = turn.catch(() => undefined);
    return turn;
  }

  async keep(owner: string, digest: string, n: number, state: JsonObject, expiry: RoundExpiry): Promise<boolean> {
    const h = this.held;
    if (!h || h.owner !== owner || h.digest !== digest || h.n !== n) return false;
    h.state = state;
    h.expiry = expiry;
    return true;
  }

  async peek(owner: string, digest: string, n: number): Promise<JsonObject | null> {
    const h = this.held;
    if (!h || h.owner !== owner || h.digest !== digest || h.n !== n) return null;
    return h.state ?? null;
  }

  async cancel(owner: string, digest: string, reason: string): Promise<void> {
    const h = this.held;
    if (!h || h.owner !== owner || h.digest !== digest) return;
    await this.giveUp(h, reason, false);
  }

  override async alarm(): Promise<void> {
    const h = this.held;
    if (!h) return;
    await this.giveUp(h, `the client did not complete input round ${h.n} within ${h.begin.up.timeoutMs} ms; the upstream request was cancelled`, true);
  }

  private async step(h: Held): Promise<RoundReply> {
    const s = await h.call.next();
    const n = h.n;
    if (s.kind !== "input") this.finish();
    return { ...s, n };
  }

  /** The call is over for the client: nothing more is parked here. */
  private finish(): void {
    this.held = null;
    this.ended = true;
    void this.ctx.storage.deleteAlarm().catch(() => undefined);
  }

  /** Cancels the upstream request (notifications/cancelled, then the stream), recording the abandoned outcome when asked to. */
  private async giveUp(h: Held, reason: string, record: boolean): Promise<void> {
    this.finish();
    const { up, leg } = h.begin;
    await postUpstream(up, leg, { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: h.call.upstreamId, reason } }).catch(() => undefined);
    h.call.stop();
    h.abort.abort(new Error(reason));
    if (!record || !h.expiry) return;
    const e = h.expiry;
    const ledger = ledgerObject(this.env, e.chain);
    const body = { ...e.draft.body, reason };
    const draft = { kind: e.draft.kind, id: crypto.randomUUID(), at: new Date().toISOString(), body, ...(e.draft.metrics ? { metrics: e.draft.metrics } : {}) };
    await ledger?.append([draft], e.signing).catch((err: unknown) => console.error("portcullis: an abandoned round's outcome was not recorded", String(err)));
  }
}
