/**
 * The `portcullis.yaml` schema (zod). Owns: field names, types, defaults and the rules that
 * relate fields to each other (namespacing, unique names). Must never: accept an unknown
 * field, or resolve secrets (that is load.ts's job, after validation).
 */
import { z } from "zod";

/** Upstream names become tool-name prefixes (`<name>__<tool>`) and URI scheme prefixes, so no `_`. */
export const UPSTREAM_NAME = /^[a-z][a-z0-9-]{0,30}$/;

const duration = z.union([
  z.number().int().positive(),
  z.string().regex(/^\d+(ms|s|m)$/, 'use a number of milliseconds or a string such as "500ms", "30s", "2m"'),
]);

export const upstreamSchema = z.strictObject({
  name: z.string().regex(UPSTREAM_NAME, "must match ^[a-z][a-z0-9-]{0,30}$ (it prefixes tool names and URIs)"),
  url: z.string().refine((u) => {
    try {
      const p = new URL(u);
      return p.protocol === "http:" || p.protocol === "https:";
    } catch {
      return false;
    }
  }, "must be an absolute http:// or https:// URL (stdio upstreams are not supported)"),
  description: z.string().max(500).optional(),
  namespace: z.boolean().optional(),
  headers: z.record(z.string().regex(/^[A-Za-z0-9-]+$/, "header names are letters, digits and -"), z.string()).optional(),
  allow: z.array(z.string().min(1)).optional(),
  deny: z.array(z.string().min(1)).optional(),
  timeout: duration.optional(),
});

export const configSchema = z.strictObject({
  /** Principal used for unauthenticated clients while the gateway listens on loopback. */
  actor: z.string().min(1).default("local:actor"),
  gateway: z.strictObject({
    /** Extra Host values accepted besides loopback (e.g. your workers.dev or custom hostname). */
    allowed_hosts: z.array(z.string().min(1)).default([]),
    /** Origins accepted when a browser-style Origin header is present. */
    allowed_origins: z.array(z.string().min(1)).default([]),
    /** SSE `retry:` hint, in milliseconds, sent with every priming event. */
    sse_retry_ms: z.number().int().min(0).max(60000).default(1000),
    /** How long an idle legacy session lives, in seconds. */
    session_ttl_s: z.number().int().min(60).max(7 * 86400).default(86400),
  }).prefault({}),
  upstreams: z.array(upstreamSchema).min(1, "at least one upstream is required"),
}).superRefine((cfg, ctx) => {
  const seen = new Map<string, number>();
  cfg.upstreams.forEach((u, i) => {
    const prev = seen.get(u.name);
    if (prev !== undefined) ctx.addIssue({ code: "custom", path: ["upstreams", i, "name"], message: `duplicate upstream name "${u.name}" (also upstreams[${prev}])` });
    else seen.set(u.name, i);
    if (cfg.upstreams.length > 1 && u.namespace === false) {
      ctx.addIssue({ code: "custom", path: ["upstreams", i, "namespace"], message: "namespace: false is only allowed with a single upstream (names from several upstreams would collide)" });
    }
  });
});

export type RawConfig = z.input<typeof configSchema>;
export type ParsedConfig = z.output<typeof configSchema>;
export type UpstreamInput = z.output<typeof upstreamSchema>;
