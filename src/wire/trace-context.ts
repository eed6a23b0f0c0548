/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/) for one client request: an incoming
 * `traceparent` is continued (its trace id kept, its parent id recorded), otherwise a trace is
 * started; either way the gateway is one span of it, with an id of its own, and that span is the
 * parent the upstream sees. `tracestate` travels along only with a valid `traceparent`, bounded.
 * Owns the header grammar and the ids. Must never: trust a header it could not parse (a malformed
 * one starts a new trace, as the spec says), carry an all-zero id, or let a header value that is
 * not plain printable ASCII reach an upstream.
 */

export interface TraceContext {
  /** 32 lowercase hex digits, never all zeros. */
  traceId: string;
  /** The gateway's own span for this request: 16 lowercase hex digits, never all zeros. */
  spanId: string;
  /** The caller's span (the incoming traceparent's parent-id); null when the gateway started the trace. */
  parentSpanId: string | null;
  /** The trace flags, 2 hex digits (01: sampled). */
  flags: string;
  /** The incoming tracestate, when it came with a valid traceparent and fits the bound. */
  tracestate?: string;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ZERO_TRACE = "0".repeat(32);
const ZERO_SPAN = "0".repeat(16);
/** The spec asks vendors to propagate at least 512 characters of tracestate; longer ones are dropped whole. */
const MAX_TRACESTATE = 512;
const PRINTABLE = /^[\x20-\x7e]*$/;

/** The fields of a `traceparent` header, or null when it is not one this gateway can continue. */
export function parseTraceparent(header: string | null | undefined): { traceId: string; parentId: string; flags: string } | null {
  if (!header) return null;
  const m = TRACEPARENT.exec(header.trim());
  if (!m) return null;
  const [, version, traceId, parentId, flags, rest] = m as unknown as [string, string, string, string, string, string | undefined];
  // Version ff is invalid; version 00 has exactly four fields; a later version may add fields after a dash.
  if (version === "ff" || (version === "00" && rest !== undefined)) return null;
  if (traceId === ZERO_TRACE || parentId === ZERO_SPAN) return null;
  return { traceId, parentId, flags };
}

function randomHex(bytes: number): string {
  const b = crypto.getRandomValues(new Uint8Array(bytes));
  let out = "";
  for (const x of b) out += x.toString(16).padStart(2, "0");
  return out;
}

/** A span id that is not all zeros (a zero draw, one in 2^64, is drawn again). */
function spanId(): string {
  for (;;) {
    const id = randomHex(8);
    if (id !== ZERO_SPAN) return id;
  }
}

/** The trace of a request with these headers: the incoming one continued, or a new one (sampled). */
export function traceOf(headers: Headers): TraceContext {
  const parsed = parseTraceparent(headers.get("traceparent"));
  if (!parsed) {
    let traceId = randomHex(16);
    while (traceId === ZERO_TRACE) traceId = randomHex(16);
    return { traceId, spanId: spanId(), parentSpanId: null, flags: "01" };
  }
  const t: TraceContext = { traceId: parsed.traceId, spanId: spanId(), parentSpanId: parsed.parentId, flags: parsed.flags };
  const state = headers.get("tracestate")?.trim();
  if (state && state.length <= MAX_TRACESTATE && PRINTABLE.test(state)) t.tracestate = state;
  return t;
}

/** The headers an upstream request carries: the gateway's span as the parent (version 00), and the tracestate. */
export function traceHeaders(t: TraceContext): [string, string][] {
  const out: [string, string][] = [["traceparent", `00-${t.traceId}-${t.spanId}-${t.flags}`]];
  if (t.tracestate) out.push(["tracestate", t.tracestate]);
  return out;
}
