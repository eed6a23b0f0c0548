/**
 * Where a grant's revocation lives: RevocationsDO shards chosen by the jti, so the check on
 * every request touches one small object, never a global singleton. Must never: answer "not
 * revoked" when the store cannot be read (callers fail closed on a throw).
 */
import type { Env } from "../env.ts";

export const REVOCATION_SHARDS = 16;

interface RevocationApi {
  isRevoked(jti: string): Promise<boolean>;
  revoke(jti: string, exp: number, by: string): Promise<void>;
}

function shardOf(jti: string): number {
  let h = 0;
  for (let i = 0; i < jti.length; i++) h = (h * 31 + jti.charCodeAt(i)) >>> 0;
  return h % REVOCATION_SHARDS;
}

export function revocationStore(env: Env, jti: string): RevocationApi {
  return env.REVOCATIONS.get(env.REVOCATIONS.idFromName(`shard-${shardOf(jti)}`)) as unknown as RevocationApi;
}
