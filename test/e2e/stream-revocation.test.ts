/**
 * Streams end with their grant, on the production build (auth.required: true, grants minted
 * locally with the gateway's key): a legacy session's GET stream and a 2026-07-28
 * `subscriptions/listen` stream deliver the upstream's list_changed while their grant is good,
 * end within the bound once the grant is revoked through `POST /v1/grants/:jti/revoke` (an admin
 * grant), and receive nothing after — while another agent's stream, whose grant stands, goes on
 * receiving; a short-lived grant's streams end at its expiry. The upstream is the dual-era
 * conformance fixture (its test_trigger_tool_change announces a tools list change on every
 * stream). Starts its own upstream and gateway; all on loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { type KeySet, parseKeySet } from "../../src/identity/keys.ts";
import { type ConformanceUpstream, startConformanceUpstream } from "../fixtures/conformance-upstream/server.ts";
import { freePort, startPortcullis } from "./harness.ts";

/** A stream ends within 1 s of its grant's revocation reaching the gateway (the watch polls every 500 ms). */
const REVOKE_BOUND_MS = 1000;

let upstream: ConformanceUpstream;
let gw: Awaited<ReturnType<typeof startPortcullis>>;
let origin = "";
let keys: KeySet;

beforeAll(async () => {
  upstream = await startConformanceUpstream({ port: 0, host: "127.0.0.1" });
  const jwk = JSON.stringify((await generateSigningKey("revocation-e2e")).privateJwk);
  keys = await parseKeySet(jwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  gw = await startPortcullis(
    `
actor: local:e2e
auth:
  required: true
  audience: ${origin}
egress:
  allow_loopback: true
upstreams:
  - name: conf
    url: ${upstream.url}
    timeout: 30s
`,
    port,
    { PORTCULLIS_SIGNING_KEY: jwk },
  );
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), upstream?.close()]);
});

async function grant(sub: string, roles: string[], ttlSeconds = 900) {
  return mintGrant(keys, { iss: origin, aud: origin, sub, team: "e2e", roles: roles as never, tools: ["*"], ttlSeconds }, { maxLifetimeSeconds: 3600 });
}

interface Watched {
  /** Every event's data (keep-alive comments excluded), with when it arrived. */
  events: { at: number; data: string }[];
  /** When the stream ended (null while open). */
  endedAt(): number | null;
  /** Resolves true once an event after `since` matches, false after `ms`. */
  waitEvent(match: (data: string) => boolean, since: number, ms: number): Promise<boolean>;
  /** Resolves with the end time once the stream has ended, null after `ms`. */
  waitEnd(ms: number): Promise<number | null>;
  cancel(): Promise<void>;
}

/** Reads an SSE response in the background. */
function watch(res: Response): Watched {
  const events: { at: number; data: string }[] = [];
  let endedAt: number | null = null;
  const reader = (res.body as ReadableStream<BufferSource>).pipeThrough(new TextDecoderStream()).getReader();
  const done = (async () => {
    let buf = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += value;
        for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
          const data = buf
            .slice(0, i)
            .split("\n")
            .filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).replace(/^ /, ""))
            .join("\n");
          buf = buf.slice(i + 2);
          if (data.trim()) events.push({ at: Date.now(), data });
        }
      }
    } catch {
      // cancelled by the test, or the connection broke
    } finally {
      endedAt = Date.now();
    }
  })();
  const poll = async <T>(check: () => T | null, ms: number): Promise<T | null> => {
    const deadline = Date.now() + ms;
    for (;;) {
      const v = check();
      if (v !== null) return v;
      if (Date.now() > deadline) return null;
      await new Promise((r) => setTimeout(r, 25));
    }
  };
  return {
    events,
    endedAt: () => endedAt,
    waitEvent: async (match, since, ms) => (await poll(() => (events.some((e) => e.at >= since && match(e.data)) ? true : null), ms)) ?? false,
    waitEnd: (ms) => poll(() => endedAt, ms),
    cancel: async () => {
      await reader.cancel().catch(() => undefined);
      await done;
    },
  };
}

const listChanged = (data: string) => data.includes("notifications/tools/list_changed");
const META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
const modernHeaders = (token: string, method: string, name?: string): Record<string, string> => ({
  "content-type": "application/json",
  accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2026-07-28",
  "mcp-method": method,
  ...(name ? { "mcp-name": name } : {}),
  authorization: `Bearer ${token}`,
});

/** Another agent (whose grant stands) makes the upstream announce a tools list change. */
let triggerToken = "";
async function trigger(): Promise<void> {
  triggerToken ||= (await grant("agent:trigger", ["agent"])).token;
  const r = await fetch(`${origin}/mcp`, {
    method: "POST",
    headers: modernHeaders(triggerToken, "tools/call", "test_trigger_tool_change"),
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "test_trigger_tool_change", arguments: {}, _meta: META } }),
    signal: AbortSignal.timeout(20_000),
  });
  expect(r.status).toBe(200);
  expect(await r.text()).toContain("Mutation triggered");
}

/** Triggers until `stream` shows a list change (its upstream stream may still be opening). */
async function seesChanges(stream: Watched): Promise<void> {
  for (let i = 0; i < 20; i++) {
    const since = Date.now();
    await trigger();
    if (await stream.waitEvent(listChanged, since, 500)) return;
  }
  throw new Error(`no list change arrived; events: ${JSON.stringify(stream.events)}`);
}

/** A legacy session's GET stream, opened with `token`. */
async function legacyGetStream(token: string): Promise<Watched> {
  const base = { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` };
  const init = await fetch(`${origin}/mcp`, {
    method: "POST",
    headers: base,
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "revocation", version: "1" } },
    }),
  });
  expect(init.status).toBe(200);
  const sid = init.headers.get("mcp-session-id")!;
  await init.text();
  const h = { ...base, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25" };
  await (await fetch(`${origin}/mcp`, { method: "POST", headers: h, body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) })).text();
  const get = await fetch(`${origin}/mcp`, { method: "GET", headers: { ...h, accept: "text/event-stream" } });
  expect(get.status).toBe(200);
  expect(get.headers.get("content-type")).toContain("text/event-stream");
  return watch(get);
}

/** A 2026-07-28 subscriptions/listen for tool list changes, opened with `token`. */
async function listenStream(token: string): Promise<Watched> {
  const r = await fetch(`${origin}/mcp`, {
    method: "POST",
    headers: modernHeaders(token, "subscriptions/listen"),
    body: JSON.stringify({ jsonrpc: "2.0", id: 41, method: "subscriptions/listen", params: { notifications: { toolsListChanged: true }, _meta: META } }),
  });
  expect(r.status).toBe(200);
  expect(r.headers.get("content-type")).toContain("text/event-stream");
  const w = watch(r);
  expect(await w.waitEvent((d) => d.includes("notifications/subscriptions/acknowledged"), 0, 10_000)).toBe(true);
  return w;
}

async function revoke(jti: string): Promise<number> {
  const admin = (await grant("human:admin", ["admin"])).token;
  const r = await fetch(`${origin}/v1/grants/${jti}/revoke`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${admin}` },
    body: "{}",
  });
  expect(r.status).toBe(200);
  expect(((await r.json()) as { revoked: string }).revoked).toBe(jti);
  return Date.now();
}

describe("a revoked grant's streams end", () => {
  for (const [kind, open] of [
    ["legacy GET stream", legacyGetStream],
    ["subscriptions/listen stream", listenStream],
  ] as const) {
    it(`a ${kind} ends within the bound of the revocation and receives nothing after; another grant's stream goes on`, async () => {
      const doomed = await grant(`agent:doomed-${kind.split(" ")[0]}`, ["agent"]);
      const stays = await grant(`agent:stays-${kind.split(" ")[0]}`, ["agent"]);
      const a = await open(doomed.token);
      const b = await open(stays.token);
      try {
        await seesChanges(a);
        await seesChanges(b);
        const revokedAt = await revoke(doomed.jti);
        const endedAt = await a.waitEnd(5000);
        expect(endedAt, "the revoked grant's stream is still open").not.toBeNull();
        expect(endedAt! - revokedAt).toBeLessThanOrEqual(REVOKE_BOUND_MS);
        // The upstream goes on announcing changes: the other stream sees them, the ended one nothing.
        const since = Date.now();
        await trigger();
        expect(await b.waitEvent(listChanged, since, 5000)).toBe(true);
        expect(b.endedAt()).toBeNull();
        expect(a.events.filter((e) => e.at >= revokedAt && listChanged(e.data))).toEqual([]);
        // And the revoked grant opens nothing new.
        const again = await fetch(`${origin}/mcp`, {
          method: "POST",
          headers: modernHeaders(doomed.token, "tools/list"),
          body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list", params: { _meta: META } }),
        });
        expect(again.status).toBe(401);
        await again.text();
      } finally {
        await a.cancel();
        await b.cancel();
      }
    });
  }
});

describe("a short-lived grant's streams end at its expiry", () => {
  it("a legacy GET stream and a listen stream, both opened with a 6-second grant, deliver until the grant expires, then end", async () => {
    const brief = await grant("agent:brief", ["agent"], 6);
    const get = await legacyGetStream(brief.token);
    const lis = await listenStream(brief.token);
    try {
      await seesChanges(get);
      await seesChanges(lis);
      expect(Date.now()).toBeLessThan(brief.exp * 1000);
      expect(get.endedAt()).toBeNull();
      expect(lis.endedAt()).toBeNull();
      const bound = brief.exp * 1000 - Date.now() + 5000;
      const [g, l] = await Promise.all([get.waitEnd(bound), lis.waitEnd(bound)]);
      for (const ended of [g, l]) {
        expect(ended).not.toBeNull();
        expect(ended!).toBeGreaterThanOrEqual(brief.exp * 1000 - 100);
        expect(ended!).toBeLessThanOrEqual(brief.exp * 1000 + 1000);
      }
      const since = Date.now();
      await trigger();
      await new Promise((r) => setTimeout(r, 700));
      expect([...get.events, ...lis.events].filter((e) => e.at >= since && listChanged(e.data))).toEqual([]);
    } finally {
      await get.cancel();
      await lis.cancel();
    }
  });
});
