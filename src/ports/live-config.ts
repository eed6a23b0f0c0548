/**
 * The live config: what the gateway serves now — the newest version stored in ConfigDO (hot
 * reload, PUT /v1/config) or, while nothing is stored, the PORTCULLIS_CONFIG var. A per-isolate
 * cache re-reads the stored version's head at most every LIVE_CONFIG_MAX_AGE_MS (one read in
 * flight shared by every caller, counted from when it started), fetches and parses a version's
 * text once (memoized by version, with the same loader as the var: loadConfig, then the policy
 * compile), and drops this isolate's tool catalog when the version changes. When the object
 * cannot be read it keeps serving the last good config (the var before any read succeeded) and
 * logs why. Also the watch open streams use to learn that the version changed (list_changed).
 * Must never: parse on the hot path when nothing changed, read the object more than once per
 * second per isolate, serve a config that failed the loader, or log a config's text.
 */
import { sha256Hex } from "../wire/canonical.ts";
import { configObject } from "../../durable-objects/object-names.ts";
import type { ConfigApi, StoredConfig, StoredConfigHead } from "../../durable-objects/contract.ts";
import { deployedConfigText } from "../config/deployed.ts";
import { ConfigError, loadConfig } from "../config/load.ts";
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Env } from "../env.ts";
import { compiledPolicy } from "../governance/engine.ts";
import { PolicyError } from "../governance/policy-compile.ts";
import { compileCondition } from "../governance/policy-cel.ts";
import { clearCatalog } from "../upstream/catalog-cache.ts";
import { bounded } from "../wire/bounded.ts";
import { Memo } from "../wire/memo.ts";

/** A stored version is served by every isolate at most this long after it was stored (plus one read). */
export const LIVE_CONFIG_MAX_AGE_MS = 1000;
/** A read of the object slower than this counts as failed (the last good config keeps serving). */
export const LIVE_CONFIG_READ_TIMEOUT_MS = 3000;
/** How often an open stream compares the live version with the one it opened under. */
export const CONFIG_WATCH_MS = 1000;

/** Parses config text with the Worker's loader: loadConfig, then the policy compile; ConfigError names every problem. */
export function parseConfigText(text: string, env: Env): GatewayConfig {
  // With the CEL compiler, a config refused for anything also names its policy conditions' problems.
  const config = loadConfig(text, env as Record<string, unknown>, { conditions: compileCondition });
  // A policy that does not compile (CEL, globs, windows) refuses the config, every problem named.
  try {
    compiledPolicy(config);
  } catch (e) {
    if (e instanceof PolicyError) throw new ConfigError(e.problems);
    throw e;
  }
  return config;
}

/** What the gateway serves: the stored version (0: the var) and its config, or the var's. */
export interface Live {
  version: number;
  sha256: string | null;
  source: "stored" | "var";
  /** For a stored version: the SHA-256 of the deployed var it was stored over (null: none). */
  base?: string | null;
}

export interface LiveConfigSource {
  head(): Promise<StoredConfigHead | null>;
  current(): Promise<StoredConfig | null>;
}

export interface LiveConfigOptions {
  /** Milliseconds (a seam for tests). */
  now?: () => number;
  maxAgeMs?: number;
  readTimeoutMs?: number;
  /** Where a failed read is reported. */
  log?: (message: string) => void;
  /** Called when the served version changes (after the first read). */
  onChange?: (from: number, to: number) => void;
}

/**
 * The cache: `live(source)` answers which version is in force (reading the source's head when
 * the last read started at least maxAgeMs ago), `text` its stored text. Parsing is the caller's
 * (configFor memoizes it by version).
 */
export class LiveConfigCache {
  private readonly now: () => number;
  private readonly maxAgeMs: number;
  private readonly readTimeoutMs: number;
  private readonly log: (m: string) => void;
  private readonly onChange: ((from: number, to: number) => void) | undefined;
  /** The last good stored config (null: nothing stored, or nothing read yet). */
  private good: StoredConfig | null = null;
  /** Whether any read succeeded. */
  private readOnce = false;
  private readAt = Number.NEGATIVE_INFINITY;

  constructor(opts: LiveConfigOptions = {}) {
    this.now = opts.now ?? Date.now;
    this.maxAgeMs = opts.maxAgeMs ?? LIVE_CONFIG_MAX_AGE_MS;
    this.readTimeoutMs = opts.readTimeoutMs ?? LIVE_CONFIG_READ_TIMEOUT_MS;
    this.log = opts.log ?? ((m) => console.error(m));
    this.onChange = opts.onChange;
  }

  /**
   * The version in force and, when stored, its text. `fresh` reads the source whatever the cache's
   * age (a config change compares against what is stored now, not what this isolate last read).
   */
  async live(source: () => LiveConfigSource, fresh = false): Promise<{ live: Live; text: string | null }> {
    // The caller that finds the cache stale refreshes it and waits for its own read; callers
    // meanwhile serve what is cached. No read is shared between requests: Workers cancels the
    // continuations of a promise whose request has ended, and a request awaiting another's read
    // would never get an answer.
    // Until one read succeeded, every caller reads: nothing cached may stand in for a stored config.
    if (fresh || !this.readOnce || this.now() - this.readAt >= this.maxAgeMs) {
      this.readAt = this.now();
      await this.refresh(source);
    }
    const g = this.good;
    return g
      ? { live: { version: g.version, sha256: g.sha256, source: "stored", base: g.base ?? null }, text: g.text }
      : { live: { version: 0, sha256: null, source: "var" }, text: null };
  }

  private async refresh(source: () => LiveConfigSource): Promise<void> {
    // Reads may overlap (see live): a change is the version this read replaced at the moment it landed.
    let change: [number, number] | null = null;
    const take = (next: StoredConfig | null) => {
      const was = this.good?.version ?? 0;
      this.good = next;
      if ((next?.version ?? 0) !== was) change = [was, next?.version ?? 0];
    };
    try {
      const s = source();
      const head = await bounded(s.head(), this.readTimeoutMs, "the config object");
      if (head === null) take(null);
      else if (!this.good || this.good.version !== head.version || this.good.sha256 !== head.sha256 || (this.good.base ?? null) !== (head.base ?? null)) {
        const cur = await bounded(s.current(), this.readTimeoutMs, "the config object");
        // An overlapping read that landed first with this version already took it.
        if (!(this.good && this.good.version === cur?.version && this.good.sha256 === cur?.sha256)) take(cur);
      }
      this.readOnce = true;
    } catch (e) {
      this.log(
        `portcullis: the stored config could not be read (${(e as Error)?.message ?? String(e)}); serving ${this.good ? `the last good version ${this.good.version}` : this.readOnce ? "the deployed config" : "the deployed config (nothing read yet)"}`,
      );
    }
    if (change && this.onChange) this.onChange(change[0], change[1]);
  }
}

const isolate = new LiveConfigCache({ onChange: () => clearCatalog() });
/** Parsed stored configs, by version (only the newest few are kept). */
const parsed = new Memo<string, GatewayConfig>({ max: 4 });
const stored = new WeakMap<GatewayConfig, Live>();

function objectSource(env: Env): () => LiveConfigSource {
  return () => configObject(env) as ConfigApi;
}

let varSha: { text: string; sha: string } | null = null;
/**
 * A stored version stored over another deployed var than the one this Worker runs: the operator
 * deployed a new config since, and the deploy wins (a reload after it stores over the new var).
 */
export function supersededByDeploy(env: Env, live: Live): boolean {
  const deployed = deployedConfigText(env);
  if (live.source !== "stored" || !live.base || deployed === undefined) return false;
  if (varSha?.text !== deployed) varSha = { text: deployed, sha: sha256Hex(deployed) };
  return varSha.sha !== live.base;
}

/** The version this isolate serves now (one object read per second at most; 0: the deployed var). */
export async function liveVersion(env: Env): Promise<Live> {
  const live = (await isolate.live(objectSource(env))).live;
  return supersededByDeploy(env, live) ? { version: 0, sha256: null, source: "var" } : live;
}

/**
 * The live config, or the var's through `fromVar` (its own memo and errors) when nothing is
 * stored; a stored version that no longer loads (a secret it names was removed) throws its
 * ConfigError, as the var would. `fresh` reads the object now (a reload's comparison), not off
 * the per-second cache.
 */
export async function liveConfig(env: Env, fromVar: (env: Env) => GatewayConfig, fresh = false): Promise<GatewayConfig> {
  const { live, text } = await isolate.live(objectSource(env), fresh);
  if (live.source === "var" || text === null || supersededByDeploy(env, live)) return fromVar(env);
  const key = `${live.version}:${live.sha256}`;
  const hit = parsed.get(key);
  if (hit) return hit;
  const cfg = parseConfigText(text, env);
  parsed.set(key, cfg);
  stored.set(cfg, live);
  return cfg;
}

/** The stored version a config object came from; undefined for the var's. */
export function storedVersionOf(cfg: GatewayConfig): Live | undefined {
  return stored.get(cfg);
}

/**
 * Calls `onChange` each time the live version moves away from the last one seen (the one in
 * force when the watch started, at first), checking every CONFIG_WATCH_MS through the isolate's
 * cache; its timer stops when `signal` aborts.
 */
export function watchConfigVersion(env: Env, signal: AbortSignal, onChange: () => void | Promise<void>, everyMs = CONFIG_WATCH_MS): void {
  if (signal.aborted) return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stop = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };
  signal.addEventListener("abort", stop, { once: true });
  void (async () => {
    const start = await liveVersion(env).catch(() => null);
    if (!start) return;
    let current = start;
    const tick = async () => {
      timer = undefined;
      if (signal.aborted) return;
      const now = await liveVersion(env).catch(() => current);
      if (signal.aborted) return;
      if (now.version !== current.version || now.sha256 !== current.sha256) {
        current = now;
        await onChange();
      }
      if (!signal.aborted) timer = setTimeout(tick, everyMs);
    };
    if (!signal.aborted) timer = setTimeout(tick, everyMs);
  })();
}
