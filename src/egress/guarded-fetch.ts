/**
 * `fetch` with the egress rules enforced on every hop. Owns: running `checkEgress` before each
 * request and fetching exactly the URL object it returned, manual redirects (each `Location`
 * resolved against the current URL and re-checked; followed only for GET/HEAD and at most
 * `maxRedirects` times; credentials dropped when a hop changes origin), one deadline for the
 * whole exchange including the body (combined with the caller's signal), and a byte bound on the
 * body. Must never: call fetch for a URL that failed the check, let the platform follow a
 * redirect, wait without a deadline, or hand back a body that can grow past `maxBytes`.
 */
import { checkEgress } from "./rules.ts";
import type { EgressRules } from "../config/egress-schema.ts";

export type EgressErrorKind = "refused" | "redirect" | "too_large" | "timeout";

export class EgressError extends Error {
  /** Short human reason, safe to show (never contains a full URL). */
  readonly reason: string;
  readonly kind: EgressErrorKind;
  constructor(kind: EgressErrorKind, reason: string) {
    super(`egress: ${reason}`);
    this.name = "EgressError";
    this.kind = kind;
    this.reason = reason;
  }
}

export interface GuardedFetchOptions {
  rules: EgressRules;
  gatewayOnLoopback: boolean;
  /** Redirect hops to follow (GET/HEAD only); defaults to `rules.max_redirects` (0: a 3xx is an error). */
  maxRedirects?: number;
  /** Body bound in bytes; defaults to `rules.max_response_bytes`. */
  maxBytes?: number;
  /** Deadline for the whole exchange (every hop and the body); defaults to `rules.timeout_ms`. */
  timeoutMs?: number;
  /** Test-only injection of the outbound fetch; defaults to the global fetch. */
  fetch?: typeof fetch;
}

/** Headers that carry credentials; dropped when a redirect leaves the origin they were meant for. */
const CREDENTIAL_HEADERS = ["authorization", "cookie", "proxy-authorization"];

const noop = (): void => {};

/** One deadline (timer + caller signal) shared by every hop and the body stream. */
class Deadline {
  readonly controller = new AbortController();
  readonly timeoutMs: number;
  timedOut = false;
  #timer: ReturnType<typeof setTimeout>;
  #outer: AbortSignal | undefined;
  #onOuter = (): void => this.controller.abort(this.#outer?.reason);

  constructor(timeoutMs: number, outer: AbortSignal | null | undefined) {
    this.timeoutMs = timeoutMs;
    this.#outer = outer ?? undefined;
    this.#timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort(this.timeoutError());
    }, timeoutMs);
    if (outer?.aborted) this.controller.abort(outer.reason);
    else outer?.addEventListener("abort", this.#onOuter, { once: true });
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  timeoutError(): EgressError {
    return new EgressError("timeout", `no complete answer within ${this.timeoutMs} ms`);
  }

  /** The error to surface once aborted: ours for the timer, the caller's reason otherwise. */
  abortError(fallback: unknown): unknown {
    if (this.timedOut) return this.timeoutError();
    if (this.signal.aborted) return this.signal.reason ?? fallback;
    return fallback;
  }

  /** Settles with `p`, or rejects as soon as the deadline fires even if `p` ignores the signal. */
  race<T>(p: Promise<T>): Promise<T> {
    if (this.signal.aborted) return Promise.reject(this.abortError(undefined));
    let onAbort = noop;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(this.abortError(undefined));
      this.signal.addEventListener("abort", onAbort, { once: true });
    });
    return Promise.race([p, aborted]).finally(() => this.signal.removeEventListener("abort", onAbort));
  }

  dispose(): void {
    clearTimeout(this.#timer);
    this.#outer?.removeEventListener("abort", this.#onOuter);
  }
}

function isRedirect(status: number): boolean {
  return status >= 300 && status < 400 && status !== 304;
}

function discard(res: Response): void {
  res.body?.cancel().catch(noop);
}

/** Wraps the body so it errors past `maxBytes` or at the deadline, and releases the deadline at the end. */
function bounded(res: Response, maxBytes: number, deadline: Deadline): Response {
  const declared = res.headers.get("content-length");
  if (declared !== null && /^\d+$/.test(declared.trim()) && Number(declared) > maxBytes) {
    discard(res);
    throw new EgressError("too_large", `response declares ${declared.trim()} bytes, more than the ${maxBytes}-byte limit`);
  }
  if (res.body === null) {
    deadline.dispose();
    return res;
  }
  // A declared, uncompressed length within the cap bounds the body already (HTTP framing): skip
  // the counting wrapper, which costs a JS hop per chunk. The deadline stays armed on the fetch
  // signal, so a stalled body still aborts.
  const encoding = (res.headers.get("content-encoding") ?? "identity").trim().toLowerCase();
  if (declared !== null && /^\d+$/.test(declared.trim()) && encoding === "identity") return res;
  const reader = res.body.getReader();
  let received = 0;
  let finished = false;
  let onAbort = noop;
  const finish = (): void => {
    finished = true;
    deadline.signal.removeEventListener("abort", onAbort);
    deadline.dispose();
  };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      onAbort = () => {
        if (finished) return;
        finish();
        const err = deadline.abortError(new EgressError("timeout", "aborted"));
        reader.cancel(err).catch(noop);
        controller.error(err);
      };
      if (deadline.signal.aborted) onAbort();
      else deadline.signal.addEventListener("abort", onAbort, { once: true });
    },
    async pull(controller) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (finished) return;
        finish();
        controller.error(deadline.abortError(e));
        return;
      }
      if (finished) return;
      if (chunk.done) {
        finish();
        controller.close();
        return;
      }
      received += chunk.value.byteLength;
      if (received > maxBytes) {
        finish();
        reader.cancel().catch(noop);
        controller.error(new EgressError("too_large", `response body exceeds the ${maxBytes}-byte limit`));
        return;
      }
      controller.enqueue(chunk.value);
    },
    cancel(reason) {
      if (!finished) finish();
      return reader.cancel(reason);
    },
  });
  return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
}

/**
 * Fetches `input` under the egress rules. Throws `EgressError` for a refused URL (the outbound
 * fetch is then never called), a redirect that may not be followed, an oversized body (up front
 * from Content-Length, or from the body stream) and the deadline; the caller's own abort
 * propagates as its reason. Network errors from fetch propagate unchanged.
 */
export async function guardedFetch(input: string | URL, init: RequestInit, opts: GuardedFetchOptions): Promise<Response> {
  const rules = opts.rules;
  const maxRedirects = opts.maxRedirects ?? rules.max_redirects;
  const maxBytes = opts.maxBytes ?? rules.max_response_bytes;
  const doFetch = opts.fetch ?? ((i: RequestInfo | URL, r?: RequestInit) => fetch(i, r));
  const method = (init.method ?? "GET").toUpperCase();
  const deadline = new Deadline(opts.timeoutMs ?? rules.timeout_ms, init.signal);
  const headers = new Headers(init.headers);
  let current: string | URL = input;
  let origin: string | undefined;
  try {
    for (let hop = 0; ; hop++) {
      const decision = checkEgress(current, rules, { gatewayOnLoopback: opts.gatewayOnLoopback });
      if (!decision.ok) throw new EgressError("refused", hop === 0 ? decision.reason : `redirect hop ${hop}: ${decision.reason}`);
      const url = decision.url;
      if (origin !== undefined && url.origin !== origin) for (const h of CREDENTIAL_HEADERS) headers.delete(h);
      origin = url.origin;
      const res = await deadline.race(doFetch(url, { ...init, headers: new Headers(headers), redirect: "manual", signal: deadline.signal }));
      if (String(res.type) === "opaqueredirect" || res.status === 0) throw new EgressError("redirect", "upstream answered with a redirect (opaque)");
      if (!isRedirect(res.status)) return bounded(res, maxBytes, deadline);
      discard(res);
      const location = res.headers.get("location");
      if (maxRedirects === 0) throw new EgressError("redirect", `upstream answered ${res.status} (a redirect); redirects are not followed`);
      if (hop >= maxRedirects) throw new EgressError("redirect", `more than ${maxRedirects} redirects`);
      if (method !== "GET" && method !== "HEAD") {
        throw new EgressError("redirect", `upstream answered ${res.status} to ${method}; redirects are only followed for GET and HEAD`);
      }
      if (location === null) throw new EgressError("redirect", `upstream answered ${res.status} without a Location`);
      try {
        current = new URL(location, url);
      } catch {
        throw new EgressError("redirect", "redirect Location is not a valid URL");
      }
    }
  } catch (e) {
    deadline.dispose();
    throw e instanceof EgressError ? e : deadline.abortError(e);
  }
}
