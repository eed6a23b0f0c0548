/**
 * Hot reload: `PUT /v1/config` (admin) and the operation behind it and the `portcullis.reload`
 * operator tool. The body is the config YAML text with mappings and policy inlined (`node
 * cli/config-files.ts FILE` prints it), raw or as JSON `{config}`. It is validated whole, as the
 * gateway would serve it — the real loader against this Worker's secrets and vars, the policy
 * compile, the gateway's own URL, the egress rules from this request's vantage — and a config
 * with any problem is refused (400, every problem) while the previous one keeps serving — so is
 * one that would rename an upstream's tools for agents, and, in enforce, one whose deny or
 * require_approval rule (or obligation) matches no tool the upstreams list now (policy-live.ts),
 * unless forced (`force`); rules that match nothing otherwise come back as `warnings`. A sound
 * one is stored in ConfigDO as the next version, its `config.changed` ledger record (version and
 * actor) durable before the 200 `{version, sha256, changed}`. Every isolate serves it within
 * about a second (src/ports/live-config.ts). Must never: store a config that failed a check, echo a
 * secret's value or the config text in an answer or a log, or take the actor from anything but
 * the verified grant.
 */
import { deployedConfigText } from "../config/deployed.ts";
import { ledgerSigning } from "../ports/ledger-writer.ts";
import { renamedUpstreams, renameProblem } from "../protocol/exposed-names.ts";
import { liveCoverage } from "../services/policy-live.ts";
import { Hono } from "hono";
import { configObject } from "../../durable-objects/object-names.ts";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { principalHas, type Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import { policyEngine } from "../governance/engine.ts";
import { sha256Hex } from "../wire/canonical.ts";
import { readBodyText } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { candidateProblems, currentConfig, requestConfig } from "./config-view.ts";
import { type AppEnv, gate } from "./gate.ts";

/** Largest config text accepted (ConfigDO's own bound). */
export const MAX_CONFIG_BODY_BYTES = 1024 * 1024;

const NO_STORE = { "cache-control": "no-store" };

export type ReloadResult =
  | { ok: true; version: number; sha256: string; changed: boolean; warnings: string[] }
  | { ok: false; status: 400 | 403 | 503; message: string; problems?: string[] };

/** What the ledger record says of a config besides its hash: names, never values. */
function detailOf(cfg: GatewayConfig): JsonObject {
  let policy = "uncompiled";
  try {
    policy = policyEngine(cfg).version;
  } catch {}
  return {
    upstreams: cfg.upstreams.map((u) => u.name),
    auth_required: cfg.auth.required,
    mode: cfg.mode,
    policy_version: policy,
    mapped_upstreams: Object.keys(cfg.mappings).filter((u) => Object.keys(cfg.mappings[u] ?? {}).length > 0),
  };
}

/**
 * Validates `text` as the gateway would serve it and stores it as the next version (admin only).
 * A config that would rename an upstream's tools for agents (its namespacing changes) is refused
 * unless `force`: open sessions listed the old names. The comparison is with the config stored now
 * (read past the per-second cache; `cached`, this request's config, when that read fails).
 */
export async function reloadConfig(env: Env, cached: GatewayConfig, req: Request, by: Principal, text: string, force = false): Promise<ReloadResult> {
  if (!by.authenticated || !principalHas(by, "admin")) return { ok: false, status: 403, message: `only an admin may reload the config; ${by.sub} is not one` };
  // Compared with what is stored now: this isolate's cached config may be up to a second behind another reload.
  let served = cached;
  try {
    served = await currentConfig(env);
  } catch {}
  if (typeof text !== "string" || text.trim() === "")
    return { ok: false, status: 400, message: "the config text is empty", problems: ["the config text is empty"] };
  const checked = candidateProblems(text, env, req);
  if (!checked.ok) return { ok: false, status: 400, message: "the config was refused; the previous one keeps serving", problems: checked.problems };
  const renamed = renamedUpstreams(served.upstreams, checked.config.upstreams);
  if (renamed.length && !force) {
    return {
      ok: false,
      status: 400,
      message: "the config would rename tools agents have listed; the previous one keeps serving (force to accept the rename)",
      problems: renamed.map(renameProblem),
    };
  }
  // The rules against what the upstreams list now: in enforce, one that should stop calls and matches nothing refuses the config.
  const reach = await requestConfig(env, checked.config, req, by);
  const coverage = await liveCoverage(checked.config, reach.upstreams, by.sub, served);
  if (coverage.blocking.length && !force) {
    return {
      ok: false,
      status: 400,
      message:
        "in enforce, a rule that should stop calls matches no real tool (the gateway would allow what it means to stop); the previous config keeps serving (fix the rule's match, or force)",
      problems: coverage.blocking,
    };
  }
  const warnings = [...coverage.warnings, ...(force ? coverage.blocking.map((l) => `forced: stored although ${l}`) : [])];
  const sha256 = sha256Hex(text);
  try {
    const signing = ledgerSigning(served);
    // The deployed var this version is stored over: a later deploy of another var supersedes it.
    const deployed = deployedConfigText(env);
    const base = deployed === undefined ? null : sha256Hex(deployed);
    const r = await configObject(env).put(text, sha256, by.sub, signing, detailOf(checked.config), base);
    if (!r.ok) return { ok: false, status: 503, message: r.message };
    return { ok: true, version: r.stored.version, sha256: r.stored.sha256, changed: r.changed, warnings };
  } catch (e) {
    return {
      ok: false,
      status: 503,
      message: `the config store could not be reached (${(e as Error)?.message ?? String(e)}); the previous config keeps serving`,
    };
  }
}

export const configRoutes = new Hono<AppEnv>();

const admin = gate({ path: "/", role: "admin", allowActor: false });

configRoutes.put("/v1/config", admin, async (c) => {
  const req = c.req.raw;
  const body = await readBodyText(req, MAX_CONFIG_BODY_BYTES);
  if (!body.ok) {
    return jsonResponse(
      {
        error: "invalid_request",
        error_description: body.reason === "timeout" ? "the body did not arrive in time" : `the body is over ${MAX_CONFIG_BODY_BYTES} bytes`,
      },
      body.reason === "timeout" ? 408 : 413,
      NO_STORE,
    );
  }
  let text = body.text;
  // ?force=true (or "force": true in a JSON body): accept a config that renames tools agents have listed, or whose rules match no tool.
  let force = new URL(req.url).searchParams.get("force") === "true";
  if ((req.headers.get("content-type") ?? "").toLowerCase().startsWith("application/json")) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {}
    const cfgText = parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>).config : undefined;
    if (typeof cfgText !== "string") {
      return jsonResponse({ error: "invalid_request", error_description: "a JSON body is {config: <the config YAML text>}" }, 400, NO_STORE);
    }
    text = cfgText;
    if ((parsed as Record<string, unknown>).force === true) force = true;
  }
  const r = await reloadConfig(c.env, c.var.cfg, req, c.var.principal, text, force);
  if (r.ok)
    return jsonResponse({ version: r.version, sha256: r.sha256, changed: r.changed, ...(r.warnings.length ? { warnings: r.warnings } : {}) }, 200, NO_STORE);
  return jsonResponse(
    {
      error: r.status === 400 ? "invalid_config" : r.status === 403 ? "insufficient_scope" : "unavailable",
      error_description: r.message,
      ...(r.problems ? { problems: r.problems } : {}),
    },
    r.status,
    NO_STORE,
  );
});
