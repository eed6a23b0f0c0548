/**
 * Shapes shared between the legacy front and SessionDO. Owns only types; must never hold logic.
 */
import type { JsonObject, JsonRpcResponse } from "./jsonrpc.ts";
import type { Leg } from "./upstream.ts";

export interface UpstreamLegRecord {
  /** The leg this session uses with that upstream; absent when the upstream was unavailable. */
  leg?: Leg;
  /** Capabilities the upstream declared (initialize result or server/discover). */
  capabilities?: JsonObject;
  instructions?: string;
  serverInfo?: JsonObject;
}

export interface SessionRecord {
  id: string;
  principal: string;
  protocolVersion: string;
  clientCapabilities: JsonObject;
  clientInfo?: JsonObject;
  logLevel?: string;
  upstreams: Record<string, UpstreamLegRecord>;
  /** Resource subscriptions held by the gateway for upstreams reached in 2026-07-28 (upstream URIs). */
  subscriptions?: Record<string, string[]>;
  createdAt: number;
  touchedAt: number;
  ttlS: number;
  ended?: boolean;
}

export interface StoredEvent {
  seq: number;
  data: string;
}

/** The SessionDO RPC surface the fronts use (kept explicit: the generated RPC types are too deep for tsc). */
export interface SessionApi {
  create(rec: SessionRecord): Promise<boolean>;
  claimRun(principal: string, id: string, ttlS: number): Promise<boolean>;
  getLeg(principal: string): Promise<UpstreamLegRecord | null>;
  putLeg(principal: string, rec: UpstreamLegRecord): Promise<boolean>;
  open(principal: string): Promise<SessionRecord | null>;
  begin(principal: string, downId: string | null, upstream: string | null): Promise<SessionRecord | null>;
  lookupRequest(principal: string, downId: string): Promise<string | null>;
  update(principal: string, patch: Partial<Pick<SessionRecord, "logLevel" | "upstreams" | "subscriptions">>): Promise<SessionRecord | null>;
  end(principal: string): Promise<SessionRecord | null>;
  addPending(principal: string, p: PendingRelay): Promise<void>;
  takePending(principal: string, id: string): Promise<PendingRelay | null>;
  putAnswer(principal: string, id: string, msg: JsonRpcResponse): Promise<void>;
  awaitAnswer(principal: string, id: string, timeoutMs: number): Promise<JsonRpcResponse | null>;
  appendEvents(stream: string, events: StoredEvent[], done: boolean): Promise<void>;
  readEvents(principal: string, stream: string, afterSeq: number): Promise<{ events: StoredEvent[]; done: boolean } | null>;
}

export interface PendingRelay {
  id: string;
  upstream: string;
  upId: string | number;
}
