/**
 * Enrollment codes: the one-time codes an admin mints (`portcullis token enroll`) so a person can
 * sign in to the OAuth flow of a hosted client (Claude, ChatGPT, VS Code) without an identity
 * provider. Owns the code format (`pce_` + 32 random bytes, base64url), where a code lives (only
 * its SHA-256, in the RevocationsDO shard of that hash, until it expires), reading it while unused
 * and taking it exactly once. Must never: store or log a code itself, hand a code's grant out
 * twice, or answer "valid" when the store could not be read.
 */
import { revocationObject } from "../../durable-objects/object-names.ts";
import type { Env } from "../env.ts";
import type { Role } from "../config/roles.ts";
import { sha256Hex } from "../wire/canonical.ts";
import { encode } from "./base64url.ts";

/** What an enrollment code grants (bounded again by the enrollment template when it is used). */
export interface EnrollmentRecord {
  sub: string;
  tools: string[];
  roles: Role[];
  /** Lifetime of the grant it signs in to, in seconds. */
  ttlSeconds: number;
  /** When the code itself expires (seconds since the epoch). */
  expiresAt: number;
  /** Who minted it. */
  by: string;
}

/** The shape every code has; anything else is refused before any lookup. */
export const ENROLLMENT_CODE = /^pce_[A-Za-z0-9_-]{43}$/;

async function keyOf(code: string): Promise<string> {
  return `enroll:${sha256Hex(code)}`;
}

/** The hash under which a code is stored (also what the ledger may name): never the code. */
export async function enrollmentId(code: string): Promise<string> {
  return (await keyOf(code)).slice("enroll:".length, "enroll:".length + 16);
}

/** Stores a new code for `record` and returns it (the only time the code exists outside the admin's hands). */
export async function mintEnrollment(env: Env, record: EnrollmentRecord): Promise<{ code: string; id: string }> {
  const bytes = new Uint8Array(32);
  crypto.getRandomValues(bytes);
  const code = `pce_${encode(bytes)}`;
  const key = await keyOf(code);
  const stored = await revocationObject(env, key).putOnce(key, JSON.stringify(record), record.expiresAt);
  if (!stored) throw new Error("an enrollment code collided with an existing one; mint again");
  return { code, id: await enrollmentId(code) };
}

export type EnrollmentLookup = { ok: true; record: EnrollmentRecord } | { ok: false; reason: "unknown" | "unavailable" };

/** The record of an unused, unexpired code; `take` consumes it (atomically: a second take finds nothing). */
export async function readEnrollment(env: Env, code: string, take: boolean): Promise<EnrollmentLookup> {
  if (!ENROLLMENT_CODE.test(code)) return { ok: false, reason: "unknown" };
  const key = await keyOf(code);
  let text: string | null;
  try {
    text = await revocationObject(env, key).readOnce(key, take);
  } catch {
    return { ok: false, reason: "unavailable" };
  }
  if (text === null) return { ok: false, reason: "unknown" };
  try {
    return { ok: true, record: JSON.parse(text) as EnrollmentRecord };
  } catch {
    return { ok: false, reason: "unknown" };
  }
}
