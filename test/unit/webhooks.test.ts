/**
 * Hold webhooks (src/ports/hold-webhooks.ts) with the network and the clock replaced: a recording fake
 * behind guardedFetch (so the egress rules still run) and a sleep that only records. The
 * signature verifies with the secret over the exact body; the body is Slack-compatible and
 * carries the hold's facts but never its arguments or stored answer; 5xx and 429 and network
 * errors are retried with 0.5 / 1 / 2 s backoff under one delivery id, at most 4 attempts; a 4xx
 * is not retried; a webhook whose secret is missing is skipped and logged by the secret's name; an
 * egress refusal is tried once and the fetch never called; logs never carry a webhook's path;
 * notifyHold never throws and hands its work to waitUntil.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import type { HoldRecord } from "../../durable-objects/contract-holds.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { GatewayConfig, HoldsConfig } from "../../src/config/gateway-config.ts";
import type { Env } from "../../src/env.ts";
import { deliverHoldEvent, notifyHold, WEBHOOK_ATTEMPTS } from "../../src/ports/hold-webhooks.ts";
import { holdLinkValid } from "../../src/ports/hold-links.ts";
import { testConfig, testUpstream } from "./fixtures.ts";

const GATEWAY = "https://gw.example.com";
const HOOK = "https://hooks.example.com/services/T000/B000/very-secret-path";
const SECRET_VALUE = "whsec-unit-0123456789";
const ARG_SECRET = "sk-live-DO-NOT-LEAK-4242";

function config(webhooks: HoldsConfig["webhooks"], extra: Partial<GatewayConfig> = {}): GatewayConfig {
  const base = testConfig([testUpstream("alpha", "https://alpha.example.com/mcp", { onLoopback: false })]);
  return {
    ...base,
    auth: { required: true, audience: GATEWAY, maxTokenLifetimeS: 86400, signingKeySecret: "PORTCULLIS_SIGNING_KEY", externalIssuers: [] },
    egress: DEFAULT_EGRESS_RULES,
    holds: { ...base.holds, webhooks },
    ...extra,
  } as GatewayConfig;
}

const env = { HOOK_SECRET: SECRET_VALUE } as unknown as Env;

function holdRecord(extra: Partial<HoldRecord> = {}): HoldRecord {
  const now = Date.parse("2026-12-01T10:00:00Z");
  return {
    v: 1,
    id: "eng~0123456789abcdef01234567",
    team: "eng",
    actionHash: "a".repeat(64),
    action: JSON.stringify({ arguments: { api_key: ARG_SECRET, amount: 5 }, principal: "agent:bot", tool: "refund", upstream: "alpha" }),
    principal: "agent:bot",
    jti: "jti-of-the-agent-grant",
    upstream: "alpha",
    tool: "refund",
    exposedName: "alpha__refund",
    rule: "payments-need-approval",
    reason: "refunds <!channel> need a human & a reason",
    classification: { effect: "write", blast_radius: "single", source: "mapping" },
    createdAt: now,
    expiresAt: now + 4 * 3_600_000,
    state: "pending",
    approver: null,
    resolvedAt: null,
    resolveReason: null,
    consumedAt: null,
    result: { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: ARG_SECRET }] } },
    notForwarded: null,
    ...extra,
  };
}

interface Sent {
  url: string;
  headers: Headers;
  body: string;
}

/** A fake receiver answering `statuses` in turn (a number: that status; "net": a network error); records every request. */
function receiver(statuses: (number | "net")[]) {
  const sent: Sent[] = [];
  const sleeps: number[] = [];
  const logs: string[] = [];
  let i = 0;
  const fetchFake = (async (input: RequestInfo | URL, init?: RequestInit) => {
    sent.push({ url: String(input), headers: new Headers(init?.headers), body: String(init?.body) });
    const s = statuses[Math.min(i++, statuses.length - 1)]!;
    if (s === "net") throw new TypeError(`Network connection lost while talking to ${HOOK}`);
    return new Response(s === 204 ? null : s < 300 ? "ok" : "nope", { status: s });
  }) as typeof fetch;
  return { sent, sleeps, logs, deps: { fetch: fetchFake, sleep: async (ms: number) => void sleeps.push(ms), log: (l: string) => void logs.push(l) } };
}

async function hmacHex(key: string, body: string): Promise<string> {
  const k = await crypto.subtle.importKey("raw", new TextEncoder().encode(key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return Array.from(new Uint8Array(await crypto.subtle.sign("HMAC", k, new TextEncoder().encode(body))), (b) => b.toString(16).padStart(2, "0")).join("");
}

describe("hold webhooks", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("a new hold's message carries signed approve and reject links (Slack buttons too) that check against this hold only; a resolved one carries none", async () => {
    const signing = { ...env, PORTCULLIS_SIGNING_KEY: '{"kty":"OKP","d":"link-test-secret"}' } as unknown as Env;
    const secret = signing.PORTCULLIS_SIGNING_KEY as string;
    const r = receiver([200, 200]);
    const hold = holdRecord();
    await deliverHoldEvent(signing, config([{ url: HOOK, events: ["created", "resolved"] }]), "created", hold, r.deps);
    const msg = JSON.parse(r.sent[0]!.body);
    const page = `${GATEWAY}/console/holds/eng~0123456789abcdef01234567`;
    const { approve, reject } = msg.portcullis.hold.links;
    expect(approve).toMatch(new RegExp(`^${page.replace(/[.?]/g, "\\$&")}\\?decide=approve&link=[A-Za-z0-9_-]{43}$`));
    expect(reject).toMatch(/\?decide=reject&link=[A-Za-z0-9_-]{43}$/);
    const actions = msg.blocks.find((b: { type: string }) => b.type === "actions");
    expect(actions.elements.map((e: { url: string }) => e.url)).toEqual([approve, reject]);
    const mac = (u: string) => new URL(u).searchParams.get("link");
    expect(holdLinkValid(secret, hold, "approve", mac(approve))).toBe(true);
    expect(holdLinkValid(secret, hold, "reject", mac(reject))).toBe(true);
    // Told apart: the other decision's MAC, another hold, a changed action, another expiry, another gateway's secret, garbage.
    expect(holdLinkValid(secret, hold, "reject", mac(approve))).toBe(false);
    expect(holdLinkValid(secret, { ...hold, id: "eng~ffffffffffffffffffffffff" }, "approve", mac(approve))).toBe(false);
    expect(holdLinkValid(secret, { ...hold, actionHash: "b".repeat(64) }, "approve", mac(approve))).toBe(false);
    expect(holdLinkValid(secret, { ...hold, expiresAt: hold.expiresAt + 1 }, "approve", mac(approve))).toBe(false);
    expect(holdLinkValid("another-secret", hold, "approve", mac(approve))).toBe(false);
    expect(holdLinkValid(secret, hold, "approve", `${mac(approve)!.slice(0, -1)}A`)).toBe(false);
    expect(holdLinkValid(secret, hold, "approve", null)).toBe(false);
    expect(JSON.stringify(msg)).not.toContain("link-test-secret");
    // A resolved hold has nothing left to decide: no links.
    await deliverHoldEvent(
      signing,
      config([{ url: HOOK, events: ["created", "resolved"] }]),
      "resolved",
      { ...hold, state: "approved", approver: "human:bo" },
      r.deps,
    );
    const resolved = JSON.parse(r.sent[1]!.body);
    expect(resolved.portcullis.hold.links).toBeUndefined();
    expect(resolved.blocks.some((b: { type: string }) => b.type === "actions")).toBe(false);
  });

  it("signs the exact body with the named secret and sends the hold's facts, never its arguments, answer or grant", async () => {
    const r = receiver([200]);
    const out = await deliverHoldEvent(env, config([{ url: HOOK, secret: "HOOK_SECRET", events: ["created", "resolved"] }]), "created", holdRecord(), r.deps);
    expect(out).toMatchObject([{ outcome: "delivered", attempts: 1, status: 200, origin: "https://hooks.example.com" }]);
    expect(r.sent).toHaveLength(1);
    const { body, headers, url } = r.sent[0]!;
    expect(url).toBe(HOOK);
    expect(headers.get("content-type")).toBe("application/json");
    expect(headers.get("x-portcullis-event")).toBe("hold.created");
    expect(headers.get("x-portcullis-delivery")).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    // The signature is HMAC-SHA256 of these exact bytes under the secret's value, and verifies with WebCrypto.
    const sig = headers.get("x-portcullis-signature")!;
    expect(sig).toBe(`sha256=${await hmacHex(SECRET_VALUE, body)}`);
    const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(SECRET_VALUE), { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
    const mac = Uint8Array.from(sig.slice(7).match(/../g)!, (h) => Number.parseInt(h, 16));
    expect(await crypto.subtle.verify("HMAC", key, mac, new TextEncoder().encode(body))).toBe(true);
    expect(await crypto.subtle.verify("HMAC", key, mac, new TextEncoder().encode(`${body} `))).toBe(false);
    // What is in it, and what never is.
    const msg = JSON.parse(body);
    expect(typeof msg.text).toBe("string");
    expect(Array.isArray(msg.blocks)).toBe(true);
    expect(msg.portcullis).toEqual({
      event: "hold.created",
      hold: {
        id: "eng~0123456789abcdef01234567",
        team: "eng",
        principal: "agent:bot",
        tool: "alpha__refund",
        upstream: "alpha",
        rule: "payments-need-approval",
        reason: "refunds <!channel> need a human & a reason",
        state: "pending",
        action_hash: "a".repeat(64),
        expires_at: "2026-12-01T14:00:00.000Z",
        approver: null,
        resolve_reason: null,
        url: `${GATEWAY}/console/holds/eng~0123456789abcdef01234567`,
      },
    });
    expect(body).not.toContain(ARG_SECRET);
    expect(body).not.toContain("api_key");
    expect(body).not.toContain("jti-of-the-agent-grant");
    expect(body).not.toContain(SECRET_VALUE);
    // Slack's mrkdwn control characters from the agent's side are escaped where Slack renders them.
    expect(msg.text).toContain("refunds &lt;!channel&gt; need a human &amp; a reason");
    expect(JSON.stringify(msg.blocks)).not.toContain("<!channel>");
    expect(msg.text).toContain(`${GATEWAY}/console/holds/eng~0123456789abcdef01234567`);
  });

  it("a resolved event names the approver and its reason", async () => {
    const r = receiver([204]);
    const hold = holdRecord({ state: "rejected", approver: "human:ann", resolvedAt: Date.now(), resolveReason: "not this week" });
    const [d] = await deliverHoldEvent(env, config([{ url: HOOK, secret: "HOOK_SECRET", events: ["resolved"] }]), "resolved", hold, r.deps);
    expect(d).toMatchObject({ outcome: "delivered", status: 204 });
    const msg = JSON.parse(r.sent[0]!.body);
    expect(r.sent[0]!.headers.get("x-portcullis-event")).toBe("hold.resolved");
    expect(msg.portcullis.hold).toMatchObject({ state: "rejected", approver: "human:ann", resolve_reason: "not this week" });
    expect(msg.text).toMatch(/rejected by human:ann/);
  });

  it("retries a 500 with backoff, then succeeds, under one delivery id", async () => {
    const r = receiver([500, 500, 200]);
    const [d] = await deliverHoldEvent(env, config([{ url: HOOK, secret: "HOOK_SECRET", events: ["created"] }]), "created", holdRecord(), r.deps);
    expect(d).toMatchObject({ outcome: "delivered", attempts: 3, status: 200 });
    expect(r.sent).toHaveLength(3);
    expect(r.sleeps).toEqual([500, 1000]);
    const ids = new Set(r.sent.map((s) => s.headers.get("x-portcullis-delivery")));
    expect(ids.size).toBe(1);
    expect([...ids][0]).toBe(d!.delivery);
    // Each attempt carries the same signed bytes.
    expect(new Set(r.sent.map((s) => s.body)).size).toBe(1);
    expect(new Set(r.sent.map((s) => s.headers.get("x-portcullis-signature"))).size).toBe(1);
  });

  it("gives up after 4 attempts (0.5 s, 1 s, 2 s between them) and logs the origin, never the path", async () => {
    const r = receiver([503]);
    const [d] = await deliverHoldEvent(env, config([{ url: HOOK, secret: "HOOK_SECRET", events: ["created"] }]), "created", holdRecord(), r.deps);
    expect(WEBHOOK_ATTEMPTS).toBe(4);
    expect(d).toMatchObject({ outcome: "failed", attempts: 4, status: 503 });
    expect(r.sent).toHaveLength(4);
    expect(r.sleeps).toEqual([500, 1000, 2000]);
    expect(r.logs).toHaveLength(1);
    expect(r.logs[0]).toContain("https://hooks.example.com");
    expect(r.logs[0]).not.toContain("very-secret-path");
    expect(r.logs[0]).toMatch(/4 attempt/);
  });

  it("retries 429 and network errors; does not retry another 4xx", async () => {
    const busy = receiver([429, "net", 200]);
    const [a] = await deliverHoldEvent(env, config([{ url: HOOK, events: ["created"] }]), "created", holdRecord(), busy.deps);
    expect(a).toMatchObject({ outcome: "delivered", attempts: 3 });
    expect(busy.sleeps).toEqual([500, 1000]);

    const gone = receiver(["net"]);
    const [b] = await deliverHoldEvent(env, config([{ url: HOOK, events: ["created"] }]), "created", holdRecord(), gone.deps);
    expect(b).toMatchObject({ outcome: "failed", attempts: 4 });
    expect(b!.reason).toMatch(/network error/);
    expect(b!.reason).not.toContain("very-secret-path");
    expect(gone.logs.join("\n")).not.toContain("very-secret-path");

    const notFound = receiver([404]);
    const [c] = await deliverHoldEvent(env, config([{ url: HOOK, events: ["created"] }]), "created", holdRecord(), notFound.deps);
    expect(c).toMatchObject({ outcome: "failed", attempts: 1, status: 404 });
    expect(notFound.sent).toHaveLength(1);
    expect(notFound.sleeps).toEqual([]);
  });

  it("skips a webhook whose secret the Worker lacks (logged by name), sends an unsigned one as configured, and the others regardless", async () => {
    const r = receiver([200]);
    const out = await deliverHoldEvent(
      env,
      config([
        { url: "https://missing.example.com/hook", secret: "NOT_SET_SECRET", events: ["created"] },
        { url: "https://plain.example.com/hook", events: ["created"] },
        { url: HOOK, secret: "HOOK_SECRET", events: ["created"] },
      ]),
      "created",
      holdRecord(),
      r.deps,
    );
    expect(out.map((d) => d.outcome)).toEqual(["skipped", "delivered", "delivered"]);
    expect(r.sent.map((s) => new URL(s.url).host).sort()).toEqual(["hooks.example.com", "plain.example.com"]);
    expect(r.sent.find((s) => s.url.startsWith("https://plain."))!.headers.get("x-portcullis-signature")).toBeNull();
    expect(r.sent.find((s) => s.url === HOOK)!.headers.get("x-portcullis-signature")).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(r.logs).toHaveLength(1);
    expect(r.logs[0]).toContain("NOT_SET_SECRET");
    expect(r.logs[0]).toContain("https://missing.example.com");
  });

  it("an egress refusal is tried once: the fetch is never called and nothing is retried", async () => {
    const r = receiver([200]);
    const out = await deliverHoldEvent(
      env,
      config([
        { url: "http://10.0.0.7/hook", events: ["created"] },
        { url: "https://127.0.0.1/hook", events: ["created"] },
        { url: "https://hooks.example.com:8443/hook", events: ["created"] },
      ]),
      "created",
      holdRecord(),
      r.deps,
    );
    expect(out.map((d) => [d.outcome, d.attempts])).toEqual([
      ["failed", 1],
      ["failed", 1],
      ["failed", 1],
    ]);
    expect(out[2]!.reason).toMatch(/port 8443 is not allowed/);
    expect(r.sent).toHaveLength(0);
    expect(r.sleeps).toEqual([]);
    expect(r.logs).toHaveLength(3);
  });

  it("a redirect is not followed (and not retried)", async () => {
    const sent: string[] = [];
    const fetchFake = (async (input: RequestInfo | URL) => {
      sent.push(String(input));
      return new Response(null, { status: 302, headers: { location: "https://elsewhere.example.com/" } });
    }) as typeof fetch;
    const [d] = await deliverHoldEvent(env, config([{ url: HOOK, events: ["created"] }]), "created", holdRecord(), {
      fetch: fetchFake,
      sleep: async () => {},
      log: () => {},
    });
    expect(d).toMatchObject({ outcome: "failed", attempts: 1 });
    expect(sent).toEqual([HOOK]);
  });

  it("only webhooks that want the event are told", async () => {
    const r = receiver([200]);
    const out = await deliverHoldEvent(
      env,
      config([{ url: HOOK, events: ["created"] }]),
      "resolved",
      holdRecord({ state: "approved", approver: "human:ann" }),
      r.deps,
    );
    expect(out).toEqual([]);
    expect(r.sent).toHaveLength(0);
  });

  it("notifyHold hands the delivery to waitUntil and never throws, even when the message cannot be built", async () => {
    const sent: string[] = [];
    vi.stubGlobal("fetch", async (input: RequestInfo | URL) => {
      sent.push(String(input));
      return new Response("ok");
    });
    const pending: Promise<unknown>[] = [];
    notifyHold(env, config([{ url: HOOK, events: ["created"] }]), "created", holdRecord(), (p) => void pending.push(p));
    expect(pending).toHaveLength(1);
    expect(await pending[0]).toMatchObject([{ outcome: "delivered" }]);
    expect(sent).toEqual([HOOK]);

    // No webhooks: nothing is scheduled.
    notifyHold(env, config([]), "created", holdRecord(), (p) => void pending.push(p));
    expect(pending).toHaveLength(1);

    // The gateway's URL unknown (no audience, no dev origin): the message cannot be built; nothing throws.
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const broken = config([{ url: HOOK, events: ["created"] }]);
    const noUrl = { ...broken, auth: { ...broken.auth, audience: undefined } } as GatewayConfig;
    expect(() => notifyHold(env, noUrl, "created", holdRecord(), (p) => void pending.push(p))).not.toThrow();
    expect(await pending[1]).toEqual([]);
    expect(warn).toHaveBeenCalled();
    warn.mockRestore();
    // A waitUntil that throws (no execution context) does not throw out of notifyHold either
    // (a URL the egress rules refuse, so the orphaned delivery reaches no network).
    const quiet = vi.spyOn(console, "warn").mockImplementation(() => {});
    expect(() =>
      notifyHold(env, config([{ url: "http://10.0.0.7/hook", events: ["created"] }]), "created", holdRecord(), () => {
        throw new Error("no context");
      }),
    ).not.toThrow();
    await new Promise((resolve) => setTimeout(resolve, 10));
    quiet.mockRestore();
  });
});
