/**
 * RoundsDO: the calls of one 2026-07-28 principal parked on 2025-11-25 upstreams between input
 * rounds, named `round:<principal>` (durable-objects/object-names.ts roundObject), each call by its
 * round id. The rounds' requests land on any isolate, but the upstream's POST stream must stay
 * open between them, so the call lives here: `begin` sends it upstream and reads to its first
 * step, each `resume` delivers the client's answers and reads to the next (rounds.ts ParkedCall
 * does the reading). Owns, in memory only, per call: the owner (principal `sub`) and the call's
 * binding digest, the round number a resume must name, the parked call, its bound (the
 * upstream's timeout; one alarm at the earliest bound) and what to record if the client never
 * comes back. Stores nothing durable but the alarm: an evicted object is ended rounds.
 * Must never: resume for anyone but the owner, accept a round number twice, or keep a call past its
 * bound without cancelling the upstream request (and recording the governed call's uncertain outcome).
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import { ledgerObject } from "../../durable-objects/object-names.ts";
import type { JsonObject, JsonRpcNotification } from "../wire/jsonrpc.ts";
import { postUpstream, requestUpstream } from "./client.ts";
import { ParkedCall, type RoundBegin, type RoundExpiry, type RoundLine, type RoundReply, type RoundsApi } from "./rounds.ts";

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
  /** When the call gives up (its bound). */
  deadline: number;
}

/**
 * A step as the object's answer stream: the call's notifications as they arrive, then the step,
 * one JSON line each (rounds.ts RoundLine). `work` is handed where notifications go from the
 * moment it takes the call (a resume waiting its turn must not take another's).
 */
function lines(work: (sink: (m: JsonRpcNotification) => void) => Promise<RoundReply | { kind: "gone"; reason: string }>): ReadableStream<Uint8Array> {
  const ts = new TransformStream<Uint8Array, Uint8Array>();
  const w = ts.writable.getWriter();
  const enc = new TextEncoder();
  const put = (line: RoundLine) => w.write(enc.encode(`${JSON.stringify(line)}\n`)).catch(() => undefined);
  void work((m) => void put({ interim: m }))
    .catch((e: unknown): RoundReply => ({ kind: "failed", reason: String((e as Error)?.message ?? e), uncertain: true, auth: false, interim: [], n: 0 }))
    .then(async (step) => {
      await put({ step });
      await w.close().catch(() => undefined);
    });
  return ts.readable;
}

/** Runs one step of `call` with its notifications going to `sink` meanwhile. */
async function withSink<T>(call: ParkedCall, sink: (m: JsonRpcNotification) => void, step: () => Promise<T>): Promise<T> {
  call.onInterim = sink;
  try {
    return await step();
  } finally {
    if (call.onInterim === sink) call.onInterim = undefined;
  }
}

/** Ended round ids kept to refuse a second begin under one (bounded; ids are random, so this is belt and braces). */
const MAX_ENDED = 1000;

export class RoundsDO extends DurableObject<Env> implements RoundsApi {
  private readonly held = new Map<string, Held>();
  private readonly ended = new Set<string>();
  /** The alarm time set now (null: none). */
  private alarmAt: number | null = null;

  async begin(id: string, b: RoundBegin): Promise<ReadableStream<Uint8Array>> {
    if (this.held.has(id) || this.ended.has(id)) {
      return lines(async () => ({ kind: "failed", reason: "this round was begun before", uncertain: false, auth: false, interim: [], n: 0 }));
    }
    const abort = new AbortController();
    const frames = requestUpstream(b.up, b.leg, b.request, { signal: abort.signal, ...(b.trace ? { trace: b.trace } : {}) });
    const call = new ParkedCall({ frames, post: (m) => postUpstream(b.up, b.leg, m) }, b.declared, String(b.request.id), { ...(b.given ?? {}) });
    const h: Held = {
      owner: b.owner,
      digest: b.digest,
      n: 1,
      call,
      begin: b,
      abort,
      busy: Promise.resolve(),
      deadline: Date.now() + b.up.timeoutMs + GRACE_MS,
    };
    this.held.set(id, h);
    return lines((sink) => withSink(call, sink, () => this.step(id, h)));
  }

  async resume(id: string, owner: string, digest: string, n: number, responses: JsonObject, declared: JsonObject): Promise<ReadableStream<Uint8Array>> {
    const h = this.mine(id, owner, digest);
    if (!h) return lines(async () => ({ kind: "gone", reason: "this input round has ended, or was never this call's" }));
    // One resume at a time: a second for the same round waits for the first, then finds its number spent.
    let release!: () => void;
    const before = h.busy;
    h.busy = new Promise<void>((r) => (release = r));
    return lines(async (sink) => {
      await before;
      try {
        if (this.held.get(id) !== h || h.n !== n) return { kind: "gone", reason: "this input round was answered already (its requestState is spent)" };
        h.n++;
        await h.call.answer(responses, declared);
        return await withSink(h.call, sink, () => this.step(id, h));
      } finally {
        release();
      }
    });
  }

  async keep(id: string, owner: string, digest: string, n: number, state: JsonObject, expiry: RoundExpiry): Promise<boolean> {
    const h = this.mine(id, owner, digest);
    if (!h || h.n !== n) return false;
    h.state = state;
    h.expiry = expiry;
    return true;
  }

  async peek(id: string, owner: string, digest: string, n: number): Promise<JsonObject | null> {
    const h = this.mine(id, owner, digest);
    if (!h || h.n !== n) return null;
    return h.state ?? null;
  }

  async cancel(id: string, owner: string, digest: string, reason: string): Promise<void> {
    const h = this.mine(id, owner, digest);
    if (h) await this.giveUp(id, h, reason, false);
  }

  /** Every parked call past its bound is given up (cancelled upstream, its outcome recorded); the alarm moves to the next bound. */
  override async alarm(): Promise<void> {
    this.alarmAt = null;
    const now = Date.now();
    const due = [...this.held].filter(([, h]) => h.deadline <= now);
    await Promise.all(
      due.map(([id, h]) =>
        this.giveUp(id, h, `the client did not complete input round ${h.n} within ${h.begin.up.timeoutMs} ms; the upstream request was cancelled`, true),
      ),
    );
    await this.schedule();
  }

  /** The call `id` when it is held for this owner and call; null otherwise (another's looks like none). */
  private mine(id: string, owner: string, digest: string): Held | null {
    const h = this.held.get(id);
    return h && h.owner === owner && h.digest === digest ? h : null;
  }

  /**
   * Reads to the call's next step. A call that answers at once never touches storage; one that
   * parks is under the alarm (its bound) before the client hears of the round.
   */
  private async step(id: string, h: Held): Promise<RoundReply> {
    const s = await h.call.next();
    const n = h.n;
    if (s.kind !== "input") this.finish(id);
    else await this.schedule();
    return { ...s, n };
  }

  /** The alarm at the earliest bound of the calls parked here (brought forward only: a late alarm finds nothing due and moves on). */
  private async schedule(): Promise<void> {
    let next: number | null = null;
    for (const h of this.held.values()) if (next === null || h.deadline < next) next = h.deadline;
    if (next === null || (this.alarmAt !== null && this.alarmAt <= next)) return;
    this.alarmAt = next;
    await this.ctx.storage.setAlarm(next);
  }

  /** The call is over for the client: nothing more of it is held here. */
  private finish(id: string): void {
    this.held.delete(id);
    this.ended.add(id);
    if (this.ended.size > MAX_ENDED) this.ended.delete(this.ended.values().next().value as string);
  }

  /** Cancels the upstream request (notifications/cancelled, then the stream), recording the abandoned outcome when asked to. */
  private async giveUp(id: string, h: Held, reason: string, record: boolean): Promise<void> {
    this.finish(id);
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
