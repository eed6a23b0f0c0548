// guardedFetch against a scripted outbound fetch: every hop re-checked, redirects bounded, size and
// time bounded, and a URL that fails the check is never fetched. Fully offline.
import { describe, expect, it } from "vitest";
import { EgressError, guardedFetch, type GuardedFetchOptions } from "../../src/egress/guarded-fetch.ts";
import { egressSchema } from "../../src/config/egress-schema.ts";

type Call = { url: URL; init: RequestInit };
type Script = (url: URL, init: RequestInit) => Response | Promise<Response>;

/** A fake outbound fetch that records every call and answers from `script`. */
function outbound(script: Script) {
  const calls: Call[] = [];
  const fetchFn = (async (input: RequestInfo | URL, init?: RequestInit) => {
    expect(input).toBeInstanceOf(URL);
    const url = input as URL;
    calls.push({ url, init: init ?? {} });
    return script(url, init ?? {});
  }) as typeof fetch;
  return { calls, fetch: fetchFn };
}

const redirect = (location: string, status = 302) => new Response(null, { status, headers: { location } });
const STRICT = egressSchema.parse({});
const LOOPBACK = egressSchema.parse({ allow_loopback: true });

function opts(fetchFn: typeof fetch, extra: Partial<GuardedFetchOptions> = {}): GuardedFetchOptions {
  return { rules: STRICT, gatewayOnLoopback: true, fetch: fetchFn, timeoutMs: 2000, ...extra };
}

async function failure(p: Promise<unknown>): Promise<EgressError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(EgressError);
    return e as EgressError;
  }
  throw new Error("expected an EgressError");
}

describe("guardedFetch: redirects", () => {
  it("refuses a 302 to the metadata address", async () => {
    const o = outbound(() => redirect("http://169.254.169.254/latest/meta-data/"));
    const e = await failure(guardedFetch("https://api.example.com/mcp", {}, opts(o.fetch, { maxRedirects: 2 })));
    expect(e.kind).toBe("refused");
    expect(e.reason).toBe("redirect hop 1: cloud metadata address");
    expect(o.calls.map((c) => c.url.href)).toEqual(["https://api.example.com/mcp"]);
  });

  it("refuses a 302 to [::ffff:7f00:1], even with allow_loopback", async () => {
    const o = outbound(() => redirect("http://[::ffff:7f00:1]:8787/mcp"));
    const e = await failure(guardedFetch("https://api.example.com/mcp", {}, opts(o.fetch, { rules: LOOPBACK, maxRedirects: 2 })));
    expect(e.kind).toBe("refused");
    expect(e.reason).toContain("embeds 127.0.0.1");
    expect(o.calls).toHaveLength(1);
  });

  it("refuses at the denied hop of an allowed → allowed → denied chain", async () => {
    const o = outbound((url) =>
      url.hostname === "a.example.com"
        ? redirect("https://b.example.com/two")
        : url.hostname === "b.example.com"
          ? redirect("https://10.0.0.7/three", 307)
          : new Response("should never be fetched"),
    );
    const e = await failure(guardedFetch("https://a.example.com/one", {}, opts(o.fetch, { maxRedirects: 2 })));
    expect(e.reason).toBe("redirect hop 2: IP literal 10.0.0.7 is in a private range (10.0.0.0/8)");
    expect(o.calls.map((c) => c.url.hostname)).toEqual(["a.example.com", "b.example.com"]);
  });

  it("follows allowed hops (relative Locations resolved against the current URL)", async () => {
    const o = outbound((url) =>
      url.pathname === "/a/b"
        ? redirect("../c?x=1", 301)
        : url.pathname === "/c"
          ? redirect("//other.example.com/final", 308)
          : new Response(`landed on ${url.href}`),
    );
    const res = await guardedFetch("https://api.example.com/a/b", {}, opts(o.fetch, { maxRedirects: 2 }));
    expect(await res.text()).toBe("landed on https://other.example.com/final");
    expect(o.calls.map((c) => c.url.href)).toEqual(["https://api.example.com/a/b", "https://api.example.com/c?x=1", "https://other.example.com/final"]);
    for (const c of o.calls) expect(c.init.redirect).toBe("manual");
  });

  it("treats any redirect as an error with maxRedirects 0 (the default)", async () => {
    const o = outbound(() => redirect("https://api.example.com/elsewhere"));
    const e = await failure(guardedFetch("https://api.example.com/mcp", {}, opts(o.fetch)));
    expect(e.kind).toBe("redirect");
    expect(e.reason).toContain("redirects are not followed");
    expect(o.calls).toHaveLength(1);
  });

  it("stops after maxRedirects hops", async () => {
    let n = 0;
    const o = outbound(() => redirect(`/hop${++n}`));
    const e = await failure(guardedFetch("https://api.example.com/", {}, opts(o.fetch, { maxRedirects: 2 })));
    expect(e.reason).toBe("more than 2 redirects");
    expect(o.calls).toHaveLength(3);
  });

  it("does not follow a redirect for POST", async () => {
    const o = outbound(() => redirect("https://api.example.com/other", 307));
    const e = await failure(guardedFetch("https://api.example.com/mcp", { method: "POST", body: "{}" }, opts(o.fetch, { maxRedirects: 2 })));
    expect(e.reason).toContain("only followed for GET and HEAD");
    expect(o.calls).toHaveLength(1);
  });

  it("drops credentials when a hop leaves the origin, keeps them within it", async () => {
    const o = outbound((url) =>
      url.pathname === "/one" ? redirect("/two") : url.pathname === "/two" ? redirect("https://other.example.com/three") : new Response("ok"),
    );
    await guardedFetch(
      "https://api.example.com/one",
      { headers: { authorization: "Bearer s3cret", cookie: "a=b", "x-keep": "1" } },
      opts(o.fetch, { maxRedirects: 2 }),
    );
    const seen = o.calls.map((c) => new Headers(c.init.headers));
    expect(seen.map((h) => h.get("authorization"))).toEqual(["Bearer s3cret", "Bearer s3cret", null]);
    expect(seen.map((h) => h.get("cookie"))).toEqual(["a=b", "a=b", null]);
    expect(seen.map((h) => h.get("x-keep"))).toEqual(["1", "1", "1"]);
  });
});

describe("guardedFetch: the check runs before any fetch", () => {
  it.each([
    "http://169.254.169.254/",
    "http://api.example.com/",
    "https://10.0.0.1/",
    "https://u:p@api.example.com/",
    "http://2130706433/",
    "file:///etc/passwd",
    "https://metadata.google.internal/",
    "not a url",
  ])("never calls fetch for %s", async (url) => {
    const o = outbound(() => new Response("must not happen"));
    const e = await failure(guardedFetch(url, {}, opts(o.fetch)));
    expect(e.kind).toBe("refused");
    expect(o.calls).toHaveLength(0);
  });

  it("fetches the canonical URL object the check decided on", async () => {
    const o = outbound(() => new Response("ok"));
    await guardedFetch("http://0x7f.1:8787/mcp", {}, opts(o.fetch, { rules: LOOPBACK }));
    expect(o.calls[0]!.url.href).toBe("http://127.0.0.1:8787/mcp");
    expect(o.calls[0]!.init.signal).toBeInstanceOf(AbortSignal);
  });
});

describe("guardedFetch: size and time bounds", () => {
  const chunks = (count: number, size: number) =>
    new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < count; i++) c.enqueue(new Uint8Array(size).fill(97));
        c.close();
      },
    });

  it("errors the body once more than maxBytes arrive", async () => {
    const o = outbound(() => new Response(chunks(10, 1024)));
    const res = await guardedFetch("https://api.example.com/big", {}, opts(o.fetch, { maxBytes: 4096 }));
    expect(res.status).toBe(200);
    const e = await failure(res.text());
    expect(e.kind).toBe("too_large");
    expect(e.reason).toBe("response body exceeds the 4096-byte limit");
  });

  it("passes a body within the bound unchanged", async () => {
    const o = outbound(() => new Response(chunks(4, 1024), { headers: { "content-type": "text/plain" } }));
    const res = await guardedFetch("https://api.example.com/ok", {}, opts(o.fetch, { maxBytes: 4096 }));
    expect(res.headers.get("content-type")).toBe("text/plain");
    expect((await res.text()).length).toBe(4096);
  });

  it("rejects up front when Content-Length exceeds maxBytes", async () => {
    const o = outbound(() => new Response("tiny", { headers: { "content-length": "999999" } }));
    const e = await failure(guardedFetch("https://api.example.com/big", {}, opts(o.fetch, { maxBytes: 4096 })));
    expect(e.kind).toBe("too_large");
    expect(e.reason).toContain("declares 999999 bytes");
  });

  it("times out when the answer never comes, even if fetch ignores the signal", async () => {
    const o = outbound(() => new Promise<Response>(() => {}));
    const started = Date.now();
    const e = await failure(guardedFetch("https://api.example.com/slow", {}, opts(o.fetch, { timeoutMs: 50 })));
    expect(e.kind).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(1500);
    expect(o.calls[0]!.init.signal!.aborted).toBe(true);
  });

  it("times out a body that stalls after the headers", async () => {
    const o = outbound(() => new Response(new ReadableStream<Uint8Array>({ start: (c) => c.enqueue(new Uint8Array([104, 105])) })));
    const res = await guardedFetch("https://api.example.com/stall", {}, opts(o.fetch, { timeoutMs: 50 }));
    const e = await failure(res.text());
    expect(e.kind).toBe("timeout");
    expect(e.reason).toBe("no complete answer within 50 ms");
  });

  it("propagates the caller's own abort", async () => {
    const o = outbound(() => new Promise<Response>(() => {}));
    const ac = new AbortController();
    const p = guardedFetch("https://api.example.com/slow", { signal: ac.signal }, opts(o.fetch, { timeoutMs: 5000 }));
    ac.abort(new Error("caller gave up"));
    await expect(p).rejects.toThrow("caller gave up");
  });

  it("uses the rules' bounds when options leave them out", async () => {
    const rules = egressSchema.parse({ max_response_bytes: 8, timeout: "40ms", max_redirects: 1 });
    const o = outbound((url) => (url.pathname === "/" ? redirect("/x") : new Response("0123456789")));
    const res = await guardedFetch("https://api.example.com/", {}, { rules, gatewayOnLoopback: false, fetch: o.fetch });
    await expect(res.text()).rejects.toThrow(/8-byte limit/);
    const slow = outbound(() => new Promise<Response>(() => {}));
    const e = await failure(guardedFetch("https://api.example.com/", {}, { rules, gatewayOnLoopback: false, fetch: slow.fetch }));
    expect(e.reason).toBe("no complete answer within 40 ms");
  });
});
