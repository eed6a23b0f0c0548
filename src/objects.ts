/**
 * The gateway's Durable Object classes, each from the file that owns it: the Worker's main module
 * exports them (src/index.ts here; a gateway project's entry re-exports them from
 * `portcullis/objects`), and wrangler binds each by class name. Must never: hold logic, or export
 * anything but those classes (every export of a Worker's main module is an entrypoint).
 */
export { CredentialsDO } from "../durable-objects/credentials.ts";
export { LedgerDO } from "../durable-objects/ledger.ts";
export { RevocationsDO } from "../durable-objects/revocations.ts";
export { SessionDO } from "../durable-objects/session.ts";
export { TasksDO } from "../durable-objects/tasks.ts";
export { HistoryDO } from "../durable-objects/history.ts";
export { HoldsDO } from "../durable-objects/holds.ts";
export { KillSwitchDO } from "../durable-objects/killswitch.ts";
export { ConfigDO } from "../durable-objects/config.ts";
export { SseDO } from "../durable-objects/http-sse.ts";
export { RoundsDO } from "./upstream/rounds-object.ts";
