/**
 * Why an upstream gave no usable answer, and what this isolate last saw of each upstream's lists.
 * Owns: classifying a failure — an upstream error (exchange.ts), a leg that could not be opened
 * (LegUnavailable), an answer that holds no list — into a FailureKind with a readable detail
 * (`Unavailable`); the last failure to open a leg to each upstream (legs.ts notes it, so a later
 * "no leg" says why); the last outcome of each list method per upstream in this isolate (ok, or
 * failing with its reason and since when), which /readyz shows (services/health.ts); and the
 * structured log line of a list answered without an upstream. Must never: keep, log or answer a
 * header value, credential or request body — only the upstream's name, the method, the kind,
 * status or error code, and a detail built by the gateway (exchange.ts puts no URL or header in
 * it; configured header values are scrubbed from it all the same, and an upstream's own error
 * message is never logged).
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { type Json, type JsonObject, type JsonRpcResponse, isObject } from "../wire/jsonrpc.ts";
import { Memo } from "../wire/memo.ts";
import { type FailureKind, UpstreamAuthError, UpstreamConnectionLost, UpstreamError, UpstreamNotConnected } from "./exchange.ts";

export type { FailureKind } from "./exchange.ts";

/** One upstream that gave no usable answer: what the list's `_meta`, the JSON-RPC error, the console and /readyz report. */
export interface Unavailable {
  upstream: string;
  reason: FailureKind;
  /** What happened, readable (no header value, credential or URL). */
  detail: string;
  /** The HTTP status the upstream answered with (`http_status`, `credential_refused`). */
  status?: number;
  /** The JSON-RPC error code it answered with (`error_answer`). */
  code?: number;
  /** The caller has not connected this OAuth upstream: where a person connects it. */
  connect?: string;
}

/**
 * No leg to the upstream could be opened (or renewed): nothing was sent. Its message is what a
 * governed call reports (forward.ts callLeg); lists say why when this isolate saw the opening fail.
 */
export class LegUnavailable extends Error {
  constructor(up: UpstreamConfig) {
    super(`upstream ${up.name} is unavailable; try again later`);
  }
}

/** The kind of an upstream error: its explicit kind, else what its class, status and `answered` say. */
export function failureKind(e: UpstreamError): FailureKind {
  if (e.kind) return e.kind;
  if (e instanceof UpstreamAuthError) return "credential_refused";
  if (e instanceof UpstreamConnectionLost) return "unreachable";
  if (e.status === 504) return "timeout";
  if (e.status === 499) return "aborted";
  if (e.answered !== undefined) return e.answered >= 400 ? "http_status" : "invalid_answer";
  return "connection_lost";
}

/** `text` with every configured header value of `up` (a static credential among them) replaced. */
function scrub(up: UpstreamConfig, text: string): string {
  let out = text;
  for (const v of Object.values(up.headers)) if (v.length >= 4) out = out.split(v).join("[redacted]");
  return out.slice(0, 300);
}

function keyOf(up: UpstreamConfig): string {
  return `${up.name}\u0000${up.url}`;
}

/** The last failure to open a leg to each upstream, in this isolate (legs.ts notes it). */
const OPEN_FAILURE_TTL_MS = 10 * 60_000;
const openFailures = new Memo<string, Unavailable>({ max: 256, ttlMs: OPEN_FAILURE_TTL_MS });

/** Why an attempt to reach `up` gave no answer; `signal` is the caller's (its abort is the caller's doing, not the upstream's). */
export function classifyFailure(up: UpstreamConfig, e: unknown, signal?: AbortSignal): Unavailable {
  if (e instanceof LegUnavailable) {
    const opening = openFailures.get(keyOf(up));
    if (opening) return { ...opening, detail: `no leg to it could be opened: ${opening.detail}` };
    return { upstream: up.name, reason: "unavailable", detail: "no leg to it could be opened" };
  }
  if (e instanceof UpstreamError) {
    const reason = signal?.aborted ? "aborted" : failureKind(e);
    const out: Unavailable = { upstream: up.name, reason, detail: scrub(up, e.detail) };
    const status = e.answered ?? (reason === "credential_refused" ? e.status : undefined);
    if (status !== undefined && (reason === "http_status" || reason === "credential_refused" || reason === "error_answer")) out.status = status;
    if (e instanceof UpstreamNotConnected) out.connect = e.connectUrl;
    return out;
  }
  if (signal?.aborted) return { upstream: up.name, reason: "aborted", detail: "the request was aborted" };
  return { upstream: up.name, reason: "unavailable", detail: "internal error in Portcullis while talking to it" };
}

/** Notes that opening a leg to `up` failed with `e` (legs.ts), so a later "no leg" says why. */
export function noteOpenFailure(up: UpstreamConfig, e: unknown): void {
  openFailures.set(keyOf(up), classifyFailure(up, e));
}

/** A leg to `up` was opened: an earlier failure no longer explains anything. */
export function noteOpened(up: UpstreamConfig): void {
  openFailures.delete(keyOf(up));
}

/**
 * What an answer to list method `method` (items under `key`) holds: a list (null), none of these
 * at all (`"none"`: the upstream answered Method not found, it lists nothing of the kind), or why
 * it is no usable list — a JSON-RPC error, or a result without the list.
 */
export function listAnswerProblem(up: UpstreamConfig, method: string, response: JsonRpcResponse, key: string): Unavailable | "none" | null {
  const err = response.error;
  if (err) {
    if (err.code === -32601) return "none";
    const message = typeof err.message === "string" ? err.message : "";
    return {
      upstream: up.name,
      reason: "error_answer",
      code: err.code,
      detail: scrub(up, `answered ${method} with error ${err.code}${message ? `: ${message}` : ""}`),
    };
  }
  const r = response.result;
  if (isObject(r) && Array.isArray(r[key])) return null;
  return { upstream: up.name, reason: "invalid_answer", detail: `answered ${method} without a ${key} list` };
}

/** What a list's `_meta` and a JSON-RPC error's `data` say of one gap. */
export function gapJson(g: Unavailable): JsonObject {
  const out: JsonObject = { upstream: g.upstream, reason: g.reason, detail: g.detail };
  if (g.status !== undefined) out.status = g.status;
  if (g.code !== undefined) out.code = g.code;
  if (g.connect !== undefined) out.connect_url = g.connect;
  return out;
}

/** The last outcome of one list method of one upstream in this isolate. */
export interface ListOutcome {
  outcome: "ok" | "failing";
  reason?: FailureKind;
  detail?: string;
  /** When this outcome began: the first failure of the current run of failures, or the first success after one (ms). */
  since: number;
  /** When it was last seen (ms). */
  at: number;
}

const MAX_OUTCOMES = 1024;
const outcomes = new Memo<string, ListOutcome>({ max: MAX_OUTCOMES });

/**
 * Notes the outcome of list method `method` on `up` (null: it answered a list). Not noted: the
 * caller's own abort, and a `per_principal` or OAuth credential refused — that is one principal's, not the upstream's.
 */
export function noteListOutcome(up: UpstreamConfig, method: string, failure: Unavailable | null, now = Date.now()): void {
  if (failure?.reason === "aborted") return;
  if (failure?.reason === "credential_refused" && (up.credentials.mode === "per_principal" || up.credentials.mode === "oauth")) return;
  const key = `${keyOf(up)}\u0000${method}`;
  const prev = outcomes.get(key);
  const outcome = failure ? "failing" : "ok";
  const since = prev && prev.outcome === outcome ? prev.since : now;
  outcomes.set(key, failure ? { outcome, reason: failure.reason, detail: failure.detail, since, at: now } : { outcome, since, at: now });
}

/** The last outcome of each list method of `up` this isolate noted, by method (empty before any). */
export function listOutcomes(up: UpstreamConfig): Record<string, ListOutcome> {
  const out: Record<string, ListOutcome> = {};
  const prefix = `${keyOf(up)}\u0000`;
  for (const k of outcomes.keys()) {
    if (!k.startsWith(prefix)) continue;
    const o = outcomes.get(k);
    if (o) out[k.slice(prefix.length)] = o;
  }
  return out;
}

/** Forgets every noted outcome and opening failure (tests). */
export function clearUpstreamOutcomes(): void {
  outcomes.clear();
  openFailures.clear();
}

/**
 * One structured line per upstream a list went without: the method, the upstream, the reason, and
 * what the client got (the others' list, or an error). An upstream's own error message is not
 * printed (its code is), nor anything of the request.
 */
export function logListGap(method: string, g: Unavailable, who: { principal: string; route?: string }, answered: "without_it" | "error"): void {
  const line: Record<string, Json> = { event: "list_unavailable", method, upstream: g.upstream, reason: g.reason };
  if (g.status !== undefined) line.status = g.status;
  if (g.code !== undefined) line.code = g.code;
  if (g.reason !== "error_answer") line.detail = g.detail;
  line.principal = who.principal;
  line.route = who.route ? `/mcp/${who.route}` : "/mcp";
  line.answered = answered;
  console.warn(JSON.stringify(line));
}
