/**
 * Hold webhooks: tells each `holds.webhooks` endpoint that wants it when a hold is created or
 * resolved. Owns the message (Slack-compatible: `text` and `blocks`, plus a `portcullis` object
 * with the hold's facts — never its arguments, its canonical action or its stored result, which
 * may carry secrets, and never a token; for a new hold, signed approve and reject links to its
 * console page, ./hold-links.ts, which decide nothing by themselves), its signature (`X-Portcullis-Signature: sha256=<hex>`,
 * HMAC-SHA256 of the exact body under the Worker secret the entry names), the delivery id (one
 * per webhook and event, the same on every retry) and the delivery itself: through
 * `guardedFetch` under the egress rules, no redirect, 5 s per attempt, at most 4 attempts with
 * 0.5 s / 1 s / 2 s backoff on a network error, a timeout, a 5xx or a 429, all inside the
 * request's waitUntil. Decision: an entry that names a secret the Worker does not have is skipped
 * (and logged by the secret's name), not sent unsigned — a receiver that checks signatures would
 * drop it anyway, and one that does not should not be taught to accept unsigned messages; an
 * entry without `secret` is sent unsigned, as configured. Must never: throw, log a webhook URL's
 * path or query (Slack-style URLs carry their credential there) or a secret's value, retry an
 * egress refusal, or wait without a bound.
 */
import type { HoldRecord } from "../../durable-objects/contract-holds.ts";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { EgressError, guardedFetch } from "../egress/guarded-fetch.ts";
import type { Env } from "../env.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { holdLink } from "./hold-links.ts";

export type HoldEvent = "created" | "resolved";

/** Attempts per delivery, and the pause before each retry. */
export const WEBHOOK_ATTEMPTS = 4;
export const WEBHOOK_BACKOFF_MS = [500, 1000, 2000] as const;
const ATTEMPT_TIMEOUT_MS = 5000;
/** A receiver's answer is read (and dropped) up to this many bytes. */
const MAX_ANSWER_BYTES = 64 * 1024;

/** What one delivery came to (tests read it; the gateway only logs failures). */
export interface WebhookDelivery {
  /** The webhook's origin (never its path: Slack-style URLs carry their credential there). */
  origin: string;
  delivery: string;
  outcome: "delivered" | "failed" | "skipped";
  attempts: number;
  /** The last HTTP status, when the receiver answered. */
  status?: number;
  reason?: string;
}

/** The seams tests replace: the outbound fetch (behind the egress check) and the backoff pause. */
export interface WebhookDeps {
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  log?: (line: string) => void;
}

/** The console page of a hold (the same URL the agent's held answer names). */
export function holdPageUrl(cfg: GatewayConfig, id: string): string {
  return `${canonicalUrl(cfg)}/console/holds/${encodeURIComponent(id)}`;
}

/** Slack mrkdwn control characters in agent- or upstream-supplied text (a reason could otherwise say `<!channel>`). */
function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return "(invalid URL)";
  }
}

/**
 * The body of one event: what a person reads in Slack, and the facts a program reads. `links`: a
 * created hold's signed approve and reject links (./hold-links.ts), which open its console page
 * with that decision proposed; the person still signs in and confirms there.
 */
export function webhookBody(event: HoldEvent, hold: HoldRecord, url: string, links?: { approve: string; reject: string }): string {
  const rule = hold.rule ?? "(mapping)";
  const expires = new Date(hold.expiresAt).toISOString();
  const who = esc(hold.principal);
  const tool = esc(hold.exposedName);
  const headline =
    event === "created"
      ? `Held for approval: ${who} wants to call ${tool} on ${esc(hold.upstream)}`
      : `Hold ${hold.state === "approved" ? "approved" : hold.state === "rejected" ? "rejected" : hold.state} by ${esc(hold.approver ?? "nobody")}: ${who}'s call of ${tool}`;
  const why = `Rule ${esc(rule)}: ${esc(hold.reason)}`;
  const answer = hold.resolveReason ? `\nApprover's reason: ${esc(hold.resolveReason)}` : "";
  const text = `${headline}. ${why}.${answer ? ` ${answer.trim()}.` : ""} Expires ${expires}. ${url}`;
  const blocks = [
    { type: "section", text: { type: "mrkdwn", text: `*${headline}*\n${why}${answer}` } },
    {
      type: "section",
      fields: [
        { type: "mrkdwn", text: `*Team*\n${esc(hold.team)}` },
        { type: "mrkdwn", text: `*State*\n${hold.state}` },
        { type: "mrkdwn", text: `*Upstream*\n${esc(hold.upstream)}` },
        { type: "mrkdwn", text: `*Expires*\n${expires}` },
      ],
    },
    { type: "section", text: { type: "mrkdwn", text: `<${url}|Open hold ${esc(hold.id)} in the console>` } },
    ...(links
      ? [
          {
            type: "actions",
            elements: [
              { type: "button", text: { type: "plain_text", text: "Approve…" }, style: "primary", url: links.approve, action_id: "portcullis_approve" },
              { type: "button", text: { type: "plain_text", text: "Reject…" }, style: "danger", url: links.reject, action_id: "portcullis_reject" },
            ],
          },
        ]
      : []),
    { type: "context", elements: [{ type: "mrkdwn", text: `action ${hold.actionHash.slice(0, 16)}… · hold ${esc(hold.id)}` }] },
  ];
  const portcullis = {
    event: `hold.${event}`,
    hold: {
      id: hold.id,
      team: hold.team,
      principal: hold.principal,
      tool: hold.exposedName,
      upstream: hold.upstream,
      rule: hold.rule,
      reason: hold.reason,
      state: hold.state,
      action_hash: hold.actionHash,
      expires_at: expires,
      approver: hold.approver,
      resolve_reason: hold.resolveReason,
      url,
      ...(links ? { links } : {}),
    },
  };
  return JSON.stringify({ text, blocks, portcullis });
}

/** `sha256=<hex>` of HMAC-SHA256(key, body). */
export async function signBody(key: string, body: string): Promise<string> {
  const k = await crypto.subtle.importKey("raw", new TextEncoder().encode(key), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", k, new TextEncoder().encode(body)));
  return `sha256=${Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

const realSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Whether a receiver's status is worth another attempt. */
function retryable(status: number): boolean {
  return status >= 500 || status === 429;
}

async function deliverOne(
  cfg: GatewayConfig,
  hook: GatewayConfig["holds"]["webhooks"][number],
  signature: string | null,
  event: HoldEvent,
  body: string,
  deps: Required<WebhookDeps>,
): Promise<WebhookDelivery> {
  const delivery = crypto.randomUUID();
  const origin = originOf(hook.url);
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "user-agent": "portcullis-webhook/1",
    "x-portcullis-event": `hold.${event}`,
    "x-portcullis-delivery": delivery,
    ...(signature ? { "x-portcullis-signature": signature } : {}),
  };
  // The request's vantage: the view of the config a route hands in marks its upstreams on loopback or not.
  const gatewayOnLoopback = cfg.upstreams.some((u) => u.onLoopback);
  let status: number | undefined;
  let reason = "";
  for (let attempt = 1; attempt <= WEBHOOK_ATTEMPTS; attempt++) {
    if (attempt > 1) await deps.sleep(WEBHOOK_BACKOFF_MS[attempt - 2] ?? WEBHOOK_BACKOFF_MS.at(-1)!);
    try {
      const res = await guardedFetch(
        hook.url,
        { method: "POST", headers, body },
        { rules: cfg.egress, gatewayOnLoopback, maxRedirects: 0, timeoutMs: ATTEMPT_TIMEOUT_MS, maxBytes: MAX_ANSWER_BYTES, fetch: deps.fetch },
      );
      status = res.status;
      await res.body?.cancel().catch(() => undefined);
      if (res.ok) return { origin, delivery, outcome: "delivered", attempts: attempt, status };
      reason = `answered ${res.status}`;
      if (!retryable(res.status)) return { origin, delivery, outcome: "failed", attempts: attempt, status, reason };
    } catch (e) {
      // A refused URL or a redirect will be refused again: no retry. A timeout or a network error may pass.
      if (e instanceof EgressError && e.kind !== "timeout") return { origin, delivery, outcome: "failed", attempts: attempt, reason: e.reason };
      reason =
        e instanceof EgressError
          ? e.reason
          : `network error: ${String((e as Error)?.message ?? e)
              .split(hook.url)
              .join(origin)}`.slice(0, 200);
      status = undefined;
    }
  }
  return { origin, delivery, outcome: "failed", attempts: WEBHOOK_ATTEMPTS, ...(status !== undefined ? { status } : {}), reason };
}

/**
 * Delivers `event` for `hold` to every webhook that wants it; resolves when each is delivered,
 * skipped or given up on (never rejects). Internal: notifyHold runs it in waitUntil; tests call it with fakes.
 */
export async function deliverHoldEvent(env: Env, cfg: GatewayConfig, event: HoldEvent, hold: HoldRecord, deps: WebhookDeps = {}): Promise<WebhookDelivery[]> {
  const d: Required<WebhookDeps> = {
    fetch: deps.fetch ?? ((i: RequestInfo | URL, r?: RequestInit) => fetch(i, r)),
    sleep: deps.sleep ?? realSleep,
    log: deps.log ?? ((line) => console.warn(line)),
  };
  try {
    const hooks = cfg.holds.webhooks.filter((w) => w.events.includes(event));
    if (hooks.length === 0) return [];
    const page = holdPageUrl(cfg, hold.id);
    // A new hold's message carries signed decision links when the gateway has its signing secret (they open the page; nothing is decided there).
    const secret = env[cfg.auth.signingKeySecret];
    const links =
      event === "created" && typeof secret === "string" && secret !== ""
        ? { approve: holdLink(secret, page, hold, "approve"), reject: holdLink(secret, page, hold, "reject") }
        : undefined;
    const body = webhookBody(event, hold, page, links);
    const out = await Promise.all(
      hooks.map(async (hook): Promise<WebhookDelivery> => {
        let signature: string | null = null;
        if (hook.secret !== undefined) {
          const key = env[hook.secret];
          if (typeof key !== "string" || key === "") {
            d.log(`portcullis: webhook to ${originOf(hook.url)} skipped: the Worker secret ${hook.secret} is not set (hold ${hold.id}, ${event})`);
            return { origin: originOf(hook.url), delivery: "", outcome: "skipped", attempts: 0, reason: `secret ${hook.secret} is not set` };
          }
          signature = await signBody(key, body);
        }
        const r = await deliverOne(cfg, hook, signature, event, body, d);
        if (r.outcome === "failed")
          d.log(`portcullis: webhook to ${r.origin} failed after ${r.attempts} attempt(s): ${r.reason} (hold ${hold.id}, ${event}, delivery ${r.delivery})`);
        return r;
      }),
    );
    return out;
  } catch (e) {
    d.log(`portcullis: webhooks for hold ${hold.id} (${event}) not sent: ${(e as Error)?.message ?? String(e)}`);
    return [];
  }
}

/** Sends `event` for `hold` to every configured webhook that wants it (signed, retried with backoff, under the egress rules); never throws. */
export function notifyHold(env: Env, cfg: GatewayConfig, event: HoldEvent, hold: HoldRecord, waitUntil: (p: Promise<unknown>) => void): void {
  if (!cfg.holds.webhooks.some((w) => w.events.includes(event))) return;
  try {
    waitUntil(deliverHoldEvent(env, cfg, event, hold));
  } catch (e) {
    console.warn(`portcullis: webhooks for hold ${hold.id} (${event}) not sent: ${(e as Error)?.message ?? String(e)}`);
  }
}
