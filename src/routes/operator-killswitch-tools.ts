/**
 * The kill switch as operator tools on /operator/mcp: `portcullis.status` (auditor, approver,
 * operator, admin) answers the real state read from KillSwitchDO, `portcullis.halt` and
 * `portcullis.resume` (admin) change it through the same operation as the JSON API, recorded on
 * the ledger before they answer. Must never: answer a state it could not read (the tool fails
 * with the reason instead), or take the actor from the arguments (it is the caller's grant).
 */
import { HALT_SCOPES, type HaltScopeName, killSwitchChangeProblem } from "../../durable-objects/contract-killswitch.ts";
import { changeKillSwitch, killSwitchStatus } from "../ports/killswitch-client.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { stateBody } from "./killswitch-api.ts";
import { registerOperatorTool } from "./operator-registry.ts";

const changeSchema: JsonObject = {
  type: "object",
  properties: {
    scope: { type: "string", enum: [...HALT_SCOPES] },
    target: { type: "string", minLength: 1, maxLength: 256, description: "the team, upstream, exposed tool name, principal or grant jti; none for global" },
    reason: { type: "string", minLength: 1, maxLength: 500 },
  },
  required: ["scope", "reason"],
  additionalProperties: false,
};

registerOperatorTool({
  name: "portcullis.status",
  description:
    'The kill switch as it is: its version and every halt (scope, target, reason, who, when). Fails — never answers "unknown" — when it cannot be read.',
  inputSchema: { type: "object", additionalProperties: false },
  roles: ["auditor", "approver", "operator", "admin"],
  run: async (_args, { env }) => {
    const r = await killSwitchStatus(env);
    if (!r.ok) throw new Error(r.message);
    return stateBody(r.snapshot) as unknown as JsonObject;
  },
});

for (const action of ["halt", "resume"] as const) {
  registerOperatorTool({
    name: `portcullis.${action}`,
    description:
      action === "halt"
        ? "Halts governed calls at a scope (global, team, upstream, tool, principal, grant) with a reason; new calls are refused within 1 s and running ones are cancelled upstream. Recorded on the ledger."
        : "Lifts a halt at a scope (global, team, upstream, tool, principal, grant), with a reason. Recorded on the ledger; resuming a scope that is not halted changes nothing.",
    inputSchema: changeSchema,
    roles: ["admin"],
    run: async (args, { env, cfg, principal }) => {
      const target = args.target === undefined ? null : args.target;
      const problem = killSwitchChangeProblem(args.scope, target, args.reason);
      if (problem) throw new Error(problem);
      const r = await changeKillSwitch(env, cfg, principal, action, args.scope as HaltScopeName, target as string | null, args.reason as string);
      if (!r.ok) throw new Error(r.message);
      return stateBody(r.snapshot, r.changed) as unknown as JsonObject;
    },
  });
}
