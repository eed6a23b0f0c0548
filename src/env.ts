/**
 * Worker bindings. Owns only the Env type; must never hold logic or defaults.
 */
import type { CredentialsDO } from "../durable-objects/credentials.ts";
import type { RevocationsDO } from "../durable-objects/revocations.ts";
import type { SessionDO } from "../durable-objects/session.ts";

export interface Env {
  SESSIONS: DurableObjectNamespace<SessionDO>;
  REVOCATIONS: DurableObjectNamespace<RevocationsDO>;
  CREDENTIALS: DurableObjectNamespace<CredentialsDO>;
  /** portcullis.yaml text, delivered as a var at deploy (or by `portcullis dev`). */
  PORTCULLIS_CONFIG?: string;
  [secretOrVar: string]: unknown;
}
