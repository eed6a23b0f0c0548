/**
 * The per-request context every MCP method handler receives, independent of the client's era.
 * Owns only the contract between the fronts (legacy.ts, modern.ts) and the method handlers.
 * Must never: carry the client's credentials (handlers have no way to send them upstream).
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import type { Env } from "../env.ts";
import type { Principal } from "../config/principal.ts";
import type { JsonObject, JsonRpcNotification, JsonRpcRequest } from "../wire/jsonrpc.ts";
import type { Era, Leg, TasksApi } from "../../durable-objects/contract.ts";
import type { HoldRecord, HoldsApi } from "../../durable-objects/contract-holds.ts";
import type { HistoryStore, LedgerWriter } from "../governance/steps.ts";
import type { KillSwitchReader } from "../governance/halts.ts";
import type { HoldBody } from "../ledger/records.ts";
import type { RouteView } from "./exposed-names.ts";
import type { TraceContext } from "../wire/trace-context.ts";

/** What a front knows about one HTTP request once the gate let it through. */
export interface FrontContext {
  env: Env;
  cfg: GatewayConfig;
  /** Who is calling (verified grant, or the loopback actor); `principal.sub` owns sessions, runs and upstream legs. */
  principal: Principal;
  /** The gateway's canonical URL (grant audience, ledger checkpoint origins). */
  gateway: string;
  waitUntil(p: Promise<unknown>): void;
  /**
   * Set on `/mcp/<upstream>` (route-view.ts): `cfg` is then the view holding that upstream alone,
   * and a legacy session belongs to the route that opened it. Absent on /mcp.
   */
  route?: RouteView;
  /** The request's W3C trace (wire/trace-context.ts): set on every MCP request (/mcp, /mcp/<upstream>, /messages); absent for operator paths. */
  trace?: TraceContext;
}

export interface Relay {
  /** Sends a notification (or a relayed request) to the client on the stream of the request being served. */
  send(msg: JsonRpcNotification | JsonRpcRequest): Promise<void>;
  /** An upstream sent a server→client request on this request's stream; relay it or refuse it upstream. */
  upstreamRequest(up: UpstreamConfig, leg: Leg, msg: JsonRpcRequest): Promise<void>;
  /** Asks the client a server→client request and waits for its answer (era bridge); absent when impossible. */
  ask?(method: string, params: JsonObject): Promise<JsonObject>;
  /** The upstream answered this request with an SSE stream: answer the client with one too, now (legacy fronts). */
  streamOpened?(): void;
  /** The upstream's stream opened with a priming event: open the client's the same way (legacy fronts). */
  streamPrimed?(): void;
  /**
   * The upstream closed its resumable stream before the response (SEP-1699 polling): close the
   * client's stream the same way if the client can resume it; the call goes on either way.
   */
  mirrorClose?(): Promise<void>;
  /** Keeps the client's answer alive while nothing else is sent (an SSE comment; opens the stream). */
  keepAlive?(): Promise<void>;
}

/** The governed path's ledger, plus the one record per tools/list (src/ports/ledger-writer.ts). */
export interface CallLedger extends LedgerWriter {
  /** The names shown and those hidden from this caller (not awaited by the list). */
  listed(shown: string[], hidden: string[]): void;
  /** Rules of the served policy that match none of the tools the upstreams list (src/services/policy-watch.ts), `id` naming the report; not awaited (absent in test fakes: not recorded). */
  unmatched?(id: string, body: JsonObject): void;
  /** A hold created or consumed by the governed path, durable on the team's chain when it resolves; the entry's id. */
  hold(kind: "hold.created" | "hold.consumed", body: HoldBody): Promise<string>;
}

/**
 * How this client context reaches each upstream: the era's legs (a legacy session's upstream
 * sessions, or a modern client's per-principal legs), built by the front that serves the request.
 */
export interface UpstreamLegs {
  /** The leg to `up` for this client context; null when the upstream is unavailable. */
  leg(up: UpstreamConfig): Promise<Leg | null>;
  /** The legacy upstream session expired: make a new one (or null). */
  renew(up: UpstreamConfig): Promise<Leg | null>;
  /** Capabilities the upstream declared, when known. */
  capabilities(up: UpstreamConfig): Promise<JsonObject | undefined>;
  /** Records which upstream serves client request `id`, and the id it carries there (legacy cancellation). */
  recordRequest(id: string | number, up: UpstreamConfig, upstreamId: string): Promise<void>;
  /**
   * The object that parks this caller's calls on legacy upstreams between input rounds (RoundsDO,
   * typed by src/upstream/rounds.ts). Absent where the front has no input rounds (legacy clients
   * are asked on their own stream).
   */
  rounds?<T>(): T;
}

/**
 * The caller's governance ports over Durable Objects (src/front/caller-stores.ts builds them for
 * both fronts). Each is reached only when a request needs it; an absent one fails closed where
 * governance needs it (no kill switch: every governed call is refused; no holds: require_approval
 * is refused; no task store: every task is refused).
 */
export interface CallerStores {
  /** This caller's team chain: decision, outcome, blocked and tools.listed records. */
  ledger: CallLedger;
  /** The caller's task ownership store (its TasksDO), reached only when a tools/call answers with a task or a request addresses one (src/ports/task-owners.ts). */
  tasks?(): TasksApi;
  /** The caller's history (its HistoryDO), reached only when the policy has history rules, rate limits or budgets. */
  history?(): HistoryStore;
  /** The kill switch (KillSwitchDO through the isolate's ≤ 1 s cache). */
  killSwitch?(): KillSwitchReader;
  /** The caller's team's holds (its HoldsDO; null for a team name no object can have). */
  holds?(): HoldsApi | null;
  /** Tells the configured webhooks a hold was created (not awaited; src/ports/hold-webhooks.ts). */
  holdCreated?(hold: HoldRecord): void;
  /** The bindings the run agent tools read the caller's team ledger through (src/services/runs.ts agentRunTool); absent: they answer that runs cannot be read here. */
  ledgerEnv?(): Env;
}

/**
 * What every method handler gets for one client request: data about the request and its caller,
 * and three ports — the upstream legs, the relay back to the client, the caller's stores.
 */
export interface CallContext {
  cfg: GatewayConfig;
  /** The `/mcp/<upstream>` route this request came in on (exposed-names.ts: edge vs governed names); absent on /mcp. */
  route?: RouteView;
  /** The client's era. */
  era: Era;
  /** The caller and its grant: which tools and upstreams it may see; `principal.sub` owns what it opens. */
  principal: Principal;
  signal: AbortSignal;
  /** Mcp-Param-* headers of the client request (modern), forwarded verbatim. */
  paramHeaders: [string, string][];
  /** Whether lists depend on the caller (grant filtering); they are then `cacheScope: private`. */
  callerFiltered: boolean;
  /** The run calls belong to: the legacy session id, or the modern Portcullis-Run-Id (null without one). */
  runId: string | null;
  /** The request's trace (the front's): every upstream request made for it carries its traceparent. */
  trace?: TraceContext;
  /** What the client declared it can do: at initialize (legacy), in this request's `_meta` (modern). */
  clientCapabilities?: JsonObject;
  /** The way to each upstream. */
  legs: UpstreamLegs;
  /** The way back to the client on this request's stream. */
  relay: Relay;
  /** The caller's ledger, history, kill switch, holds and tasks. */
  stores: CallerStores;
}

export interface Outcome {
  response: import("../wire/jsonrpc.ts").JsonRpcResponse;
  /** HTTP status for a JSON answer (an upstream's 4xx passes through for modern clients). */
  status: number;
  /** Set when the answer is an input round of the gateway's (a legacy upstream asked the modern client something): which one. */
  round?: import("../governance/steps.ts").RoundRef;
}

/** One input round of a parked call (src/upstream/rounds.ts). */
export type { RoundRef } from "../governance/steps.ts";
