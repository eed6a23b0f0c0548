/**
 * Input rounds for a 2026-07-28 client on a 2025-11-25 upstream: the upstream asks the client
 * something mid-call (elicitation/create, sampling/createMessage, roots/list on its POST stream),
 * and the stateless client can only be asked through an `input_required` result it answers by
 * sending the call again. Owns the parked call's state machine (ParkedCall: read the upstream's
 * stream until it answers or asks; gather the requests that arrive together into one round under
 * keys made from their JSON-RPC ids; deliver the client's inputResponses as the answers to those
 * requests; refuse upstream what the client did not declare, as a 2025-11-25 client would), the
 * round token the client echoes as `requestState` (`pcr1.<round id>.<n>.<mac>`: a MAC under the
 * gateway's secret over the round, its number, the principal and the call, so another
 * principal's, an altered or a replayed one never reaches the upstream), and the surface of the
 * object that holds a principal's parked calls (RoundsDO, rounds-object.ts).
 * Must never: send the upstream a client's requestState or inputResponses keys it did not ask
 * for, answer one upstream request twice, or keep a parked call past its bound.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import type { Leg } from "../../durable-objects/contract.ts";
import { labelledMac, sameMac } from "../identity/secret-mac.ts";
import { canonicalHash } from "../wire/canonical.ts";
import type { TraceContext } from "../wire/trace-context.ts";
import {
  ErrorCode,
  errorResponse,
  isNotification,
  isObject,
  isRequest,
  type JsonObject,
  type JsonRpcMessage,
  type JsonRpcNotification,
  type JsonRpcRequest,
  type JsonRpcResponse,
} from "../wire/jsonrpc.ts";
import { answers, type Frame, UpstreamAuthError, UpstreamError, UpstreamSessionGone, UpstreamUncertain } from "./exchange.ts";

/** The client capability each server→client request needs (what a 2025-11-25 client checks). */
export const CAPABILITY_FOR: Record<string, string> = {
  "sampling/createMessage": "sampling",
  "elicitation/create": "elicitation",
  "roots/list": "roots",
};

/** The client capabilities a client may receive relays (legacy) or input rounds (modern) for. */
export function relayableCapabilities(clientCaps: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const k of ["sampling", "elicitation", "roots"]) if (clientCaps[k] !== undefined) out[k] = clientCaps[k]!;
  return out;
}

/**
 * The relayable subset of `clientCaps` as one stable text: what keys an upstream session (and the
 * tool list it is shown) per set of capabilities; "" for none.
 */
export function capabilitiesKey(clientCaps: JsonObject): string {
  const caps = relayableCapabilities(clientCaps);
  const keys = Object.keys(caps).sort();
  return keys.length === 0 ? "" : JSON.stringify(keys.map((k) => [k, caps[k]]));
}

/** Requests whose 2026-07-28 results may be input_required (SEP-2322): the ones a round can bridge. */
export const ROUND_METHODS = new Set(["tools/call", "prompts/get", "resources/read"]);

/** How long the requests a round gathers may trail the first one (they usually come in one write). */
const GATHER_MS = 40;

/** What one step of a parked call came to. */
export type RoundStep =
  | { kind: "input"; requests: Record<string, JsonObject>; interim: JsonRpcNotification[] }
  | { kind: "answered"; response: JsonRpcResponse; status: number; interim: JsonRpcNotification[] }
  | { kind: "failed"; reason: string; uncertain: boolean; auth: boolean; interim: JsonRpcNotification[]; sessionGone?: true };

/** What a parked call reads from and writes to: the upstream request's frames, and the way to post answers upstream. */
export interface ParkedIo {
  frames: AsyncIterator<Frame>;
  post(msg: JsonRpcMessage): Promise<void>;
}

interface Ask {
  id: string | number;
  method: string;
  params: JsonObject;
}

const KEY = /^[A-Za-z0-9_.~-]{1,64}$/;

/**
 * One upstream request parked across a client's rounds. `declared` is what the client declared in
 * the round's request (its `_meta` client capabilities); `upstreamId` is the id the upstream sees.
 */
export class ParkedCall {
  private pull: Promise<IteratorResult<Frame>> | undefined;
  private readonly asks = new Map<string, Ask>();
  private interim: JsonRpcNotification[] = [];
  private over = false;
  /** Where notifications go as they arrive (the object's stream to the waiting request); unset: they wait for the step. */
  onInterim: ((m: JsonRpcNotification) => void) | undefined;

  /**
   * `given`: inputResponses the client sent with its first request (before any round): a request
   * under one of those keys is answered with it at once (each once), as a 2026-07-28 server reads
   * responses it is handed.
   */
  constructor(
    private readonly io: ParkedIo,
    private declared: JsonObject,
    readonly upstreamId: string,
    private readonly given: JsonObject = {},
    private readonly gatherMs = GATHER_MS,
  ) {}

  /** Whether the call came to its answer or its failure (nothing more to read). */
  get done(): boolean {
    return this.over;
  }

  /**
   * The client's answers (inputResponses by key) to the round's requests, delivered upstream as
   * the responses to them; keys the round did not ask are ignored, unanswered ones are asked again.
   * `declared` is the new round's client capabilities.
   */
  async answer(responses: JsonObject, declared: JsonObject): Promise<void> {
    this.declared = declared;
    for (const [key, value] of Object.entries(responses)) {
      const ask = this.asks.get(key);
      if (!ask || !isObject(value)) continue;
      this.asks.delete(key);
      await this.io.post({ jsonrpc: "2.0", id: ask.id, result: value }).catch(() => undefined);
    }
  }

  /** Reads on until the upstream answers, fails, or asks the client something (one round). */
  async next(): Promise<RoundStep> {
    try {
      if (this.asks.size > 0) {
        // Answers are still owed: the round asks them again, with whatever else comes meanwhile.
        const early = await this.gather();
        return early ?? this.round();
      }
      for (;;) {
        const r = await this.take();
        if (r === "idle") continue;
        if (r.done) return this.fail(new UpstreamUncertain("", "closed the stream before answering", 502));
        const step = await this.frame(r.value);
        if (step) return step;
        if (this.asks.size > 0) return (await this.gather()) ?? this.round();
      }
    } catch (e) {
      return this.fail(e);
    }
  }

  /** The upstream request is over for the gateway: later frames are not read. */
  stop(): void {
    this.over = true;
    this.pull = undefined;
    void this.io.frames.return?.(undefined)?.catch(() => undefined);
  }

  private round(): RoundStep {
    const requests: Record<string, JsonObject> = {};
    for (const [key, ask] of this.asks) requests[key] = { method: ask.method, params: ask.params };
    return { kind: "input", requests, interim: this.drain() };
  }

  /** Collects what follows a request for a moment: more requests join the round; an answer ends it. */
  private async gather(): Promise<RoundStep | null> {
    const until = Date.now() + this.gatherMs;
    for (let left = this.gatherMs; left > 0; left = until - Date.now()) {
      const r = await this.take(left);
      if (r === "idle") return null;
      if (r.done) return this.fail(new UpstreamUncertain("", "closed the stream before answering", 502));
      const step = await this.frame(r.value);
      if (step) return step;
    }
    return null;
  }

  /** One frame: the answer ends the call, a request joins the round (or is refused upstream), a notification waits for the client. */
  private async frame(f: Frame): Promise<RoundStep | null> {
    const m = f.message;
    if (answers(m, this.upstreamId)) {
      this.stop();
      return { kind: "answered", response: m, status: f.status, interim: this.drain() };
    }
    if (isRequest(m)) {
      await this.request(m);
      return null;
    }
    if (isNotification(m)) {
      if (this.onInterim) this.onInterim(m);
      else this.interim.push(m);
    }
    return null;
  }

  private async request(m: JsonRpcRequest): Promise<void> {
    if (m.method === "ping") {
      await this.io.post({ jsonrpc: "2.0", id: m.id, result: {} }).catch(() => undefined);
      return;
    }
    const cap = CAPABILITY_FOR[m.method];
    if (cap === undefined || this.declared[cap] === undefined) {
      const why = cap ? `the client did not declare the ${cap} capability` : "a 2026-07-28 client cannot be asked it";
      await this.io.post(errorResponse(m.id, ErrorCode.MethodNotFound, `Portcullis did not relay ${m.method}: ${why}`)).catch(() => undefined);
      return;
    }
    const key = this.keyFor(m.id);
    const ready = this.given[key];
    if (isObject(ready)) {
      delete this.given[key];
      await this.io.post({ jsonrpc: "2.0", id: m.id, result: ready }).catch(() => undefined);
      return;
    }
    this.asks.set(key, { id: m.id, method: m.method, params: isObject(m.params) ? m.params : {} });
  }

  /** The input's key: the upstream's request id where it makes one (unique in the call), else a made one. */
  private keyFor(id: string | number): string {
    const base = KEY.test(String(id)) ? String(id) : `input-${crypto.randomUUID().slice(0, 8)}`;
    let key = base;
    for (let n = 2; this.asks.has(key); n++) key = `${base}~${n}`;
    return key;
  }

  /** The next frame, or "idle" when `ms` passed first (the pending read is kept for the next call). */
  private async take(ms?: number): Promise<IteratorResult<Frame> | "idle"> {
    if (this.over) return { done: true, value: undefined };
    this.pull ??= this.io.frames.next();
    const p = this.pull;
    if (ms === undefined) {
      const r = await p;
      this.pull = undefined;
      return r;
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const idle = new Promise<"idle">((resolve) => {
      timer = setTimeout(() => resolve("idle"), ms);
    });
    const r = await Promise.race([p, idle]).finally(() => {
      if (timer !== undefined) clearTimeout(timer);
    });
    if (r !== "idle") this.pull = undefined;
    return r;
  }

  private drain(): JsonRpcNotification[] {
    return this.interim.splice(0);
  }

  private fail(e: unknown): RoundStep {
    this.stop();
    const reason = e instanceof UpstreamError ? e.detail || e.message : String((e as Error)?.message ?? e);
    const uncertain = !(e instanceof UpstreamError) || e instanceof UpstreamUncertain;
    const failed: RoundStep = { kind: "failed", reason, uncertain, auth: e instanceof UpstreamAuthError, interim: this.drain() };
    // The upstream forgot the session (404): nothing ran; the caller renews the session and begins again.
    if (e instanceof UpstreamSessionGone) failed.sessionGone = true;
    return failed;
  }
}

// ---- the round token (requestState) --------------------------------------------------------

const TOKEN = /^pcr1\.([0-9a-f]{32})\.([0-9]{1,3})\.([A-Za-z0-9_-]{43})$/;
const LABEL = "portcullis input round";

/** What a round token binds: the round, its number, the principal and the call (method, name, arguments). */
export interface RoundBinding {
  principal: string;
  upstream: string;
  method: string;
  /** The tool's or prompt's exposed name, or the resource URI. */
  name: string;
  /** The call's arguments (tools/call, prompts/get), bound by their canonical hash. */
  arguments: JsonObject | undefined;
}

/** A fresh round id (128 random bits, hex). */
export function newRoundId(): string {
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The digest of a binding the token's MAC covers (also what the object checks on resume). */
export async function bindingDigest(b: RoundBinding): Promise<string> {
  return canonicalHash({ principal: b.principal, upstream: b.upstream, method: b.method, name: b.name, arguments: b.arguments ?? null });
}

/** The token round `n` of round `id` gives the client as its requestState. */
export function roundToken(secret: string, id: string, n: number, digest: string): string {
  return `pcr1.${id}.${n}.${labelledMac(secret, LABEL, `${id}\n${n}\n${digest}`)}`;
}

/** Whether `state` looks like a round token of this gateway's (it may still fail its check). */
export function isRoundToken(state: unknown): state is string {
  return typeof state === "string" && state.startsWith("pcr1.");
}

/** The round a token names, when its MAC holds for this binding; null otherwise (altered, foreign, or for another call). */
export function openRoundToken(secret: string, state: string, digest: string): { id: string; n: number } | null {
  const m = TOKEN.exec(state);
  if (!m) return null;
  const id = m[1]!;
  const n = Number(m[2]);
  return sameMac(labelledMac(secret, LABEL, `${id}\n${n}\n${digest}`), m[3]) ? { id, n } : null;
}

// ---- the object's surface ------------------------------------------------------------------

/** What starts a parked call: whose it is, the upstream request, and what the object writes if the client never comes back. */
export interface RoundBegin {
  /** The principal's `sub` and the binding digest: every later request must name both. */
  owner: string;
  digest: string;
  up: UpstreamConfig;
  leg: Leg;
  request: JsonRpcRequest;
  declared: JsonObject;
  /** inputResponses the first request carried (ParkedCall `given`). */
  given?: JsonObject;
  trace?: TraceContext;
}

/** Written by the object when a round is abandoned (the governed call's uncertain outcome): the chain, how it signs, the draft. */
export interface RoundExpiry {
  chain: string;
  signing: { secret: string; gateway: string };
  draft: { kind: "outcome"; body: JsonObject; metrics?: JsonObject };
}

/** A step of the call, with the round number it opened (input) — the token's `n`. */
export type RoundReply = RoundStep & { n: number };

/** What a step of the object's stream carries: a notification as it arrived, then the step (or `gone`), one JSON line each. */
export type RoundLine = { interim: JsonRpcNotification } | { step: RoundReply | { kind: "gone"; reason: string } };

/** Reads an object's step stream: each notification to `interim` as it comes, then the step. */
export async function readRoundLines(
  stream: ReadableStream<Uint8Array>,
  interim: (m: JsonRpcNotification) => Promise<void>,
): Promise<RoundReply | { kind: "gone"; reason: string }> {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (value) buf += value;
      for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
        const line = JSON.parse(buf.slice(0, i)) as RoundLine;
        buf = buf.slice(i + 1);
        if ("step" in line) return line.step;
        await interim(line.interim);
      }
      if (done) throw new Error("the input round's object ended its answer early");
    }
  } finally {
    void reader.cancel().catch(() => undefined);
  }
}

/** RoundsDO's RPC surface (one object per principal, `round:<sub>`; each call by its round id). */
export interface RoundsApi {
  /** Starts the call; its step stream (a RoundLine per line). */
  begin(id: string, b: RoundBegin): Promise<ReadableStream<Uint8Array>>;
  /** The answers to round `n`, and the next step's stream; its step is `gone` when the call is over, expired, or never was this owner's. */
  resume(id: string, owner: string, digest: string, n: number, responses: JsonObject, declared: JsonObject): Promise<ReadableStream<Uint8Array>>;
  /**
   * Keeps a governed call's state (opaque here) with round `n`, and what to record if the client
   * never completes it; false when the round is not this owner's current one.
   */
  keep(id: string, owner: string, digest: string, n: number, state: JsonObject, expiry: RoundExpiry): Promise<boolean>;
  /** The state kept with round `n`, when `n` is this owner's current round; null otherwise. */
  peek(id: string, owner: string, digest: string, n: number): Promise<JsonObject | null>;
  /** The call ended on the gateway's side (a halt, a refusal, the client's request aborted): the upstream request is cancelled. */
  cancel(id: string, owner: string, digest: string, reason: string): Promise<void>;
}
