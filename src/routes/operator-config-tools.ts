/**
 * Hot reload as an operator tool on /operator/mcp: `portcullis.reload {config}` (admin) stores a
 * new version of the gateway config through the same operation as `PUT /v1/config` — validated
 * whole against this Worker's env, refused with every problem (the previous config keeps
 * serving), recorded on the ledger before it answers {version, sha256, changed}. Must never:
 * take the actor from the arguments (it is the caller's grant), or echo the config text.
 */
import type { JsonObject } from "../wire/jsonrpc.ts";
import { MAX_CONFIG_BODY_BYTES, reloadConfig } from "./config-admin.ts";
import { registerOperatorTool } from "./operator-registry.ts";

registerOperatorTool({
  name: "portcullis.reload",
  description:
    "Hot-reloads the gateway config (upstreams, mappings, policy) without a redeploy: `config` is the whole portcullis.yaml text with mappings and policy inlined (`npx node cli/config-files.ts FILE` prints it). A config with any problem is refused whole, every problem named, and the previous one keeps serving; a sound one becomes the next version, recorded on the ledger, and every isolate serves it within seconds.",
  inputSchema: {
    type: "object",
    properties: {
      config: { type: "string", minLength: 1, maxLength: MAX_CONFIG_BODY_BYTES },
      force: {
        type: "boolean",
        description:
          "accept a config that renames an upstream's tools for agents (its namespacing changes), or whose deny/approval rule matches no real tool in enforce",
      },
    },
    required: ["config"],
    additionalProperties: false,
  },
  roles: ["admin"],
  run: async (args, { env, cfg, principal, req }) => {
    if (typeof args.config !== "string") throw new Error("config must be the config YAML text");
    const r = await reloadConfig(env, cfg, req, principal, args.config, args.force === true);
    if (!r.ok) throw new Error(r.problems?.length ? `${r.message}:\n- ${r.problems.join("\n- ")}` : r.message);
    return { version: r.version, sha256: r.sha256, changed: r.changed, warnings: r.warnings } satisfies JsonObject;
  },
});
