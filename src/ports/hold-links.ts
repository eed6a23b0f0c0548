/**
 * Signed decision links for hold notifications: an approve link and a reject link for one exact
 * hold, which open that hold's console page with the decision proposed (`?decide=&link=`). The
 * link's MAC (HMAC-SHA256 under a key derived from the gateway's signing secret, base64url)
 * covers the hold id, the decision, the action hash and the expiry, so an altered link, a link of
 * another hold, or one whose action changed is told apart and said so on the page. A link is not
 * a credential: the person still signs in, separation of duties still applies, and nothing is
 * decided until they confirm on the page; it serves once in effect, since a decided or expired
 * hold has nothing left to decide. Must never: decide anything, carry a token, or accept a MAC
 * without comparing it in constant time.
 */
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { utf8ToBytes } from "@noble/hashes/utils.js";
import type { HoldRecord } from "../../durable-objects/contract-holds.ts";

export type LinkDecision = "approve" | "reject";

function base64url(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

type LinkFacts = Pick<HoldRecord, "id" | "actionHash" | "expiresAt">;

/** The MAC of a decision link for `hold` (never the secret: a key derived from it under its own label). */
export function holdLinkMac(secret: string, hold: LinkFacts, decision: LinkDecision): string {
  const key = sha256(utf8ToBytes(`portcullis hold link v1\n${secret}`));
  return base64url(hmac(sha256, key, utf8ToBytes(`${hold.id}\n${decision}\n${hold.actionHash}\n${hold.expiresAt}`)));
}

/** The link that opens `pageUrl` (the hold's console page) with `decision` proposed. */
export function holdLink(secret: string, pageUrl: string, hold: LinkFacts, decision: LinkDecision): string {
  return `${pageUrl}?decide=${decision}&link=${holdLinkMac(secret, hold, decision)}`;
}

/** Whether `mac` is this hold's link for `decision` (constant time over the expected length). */
export function holdLinkValid(secret: string, hold: LinkFacts, decision: LinkDecision, mac: string | null | undefined): boolean {
  if (typeof mac !== "string") return false;
  const want = holdLinkMac(secret, hold, decision);
  if (mac.length !== want.length) return false;
  let diff = 0;
  for (let i = 0; i < want.length; i++) diff |= want.charCodeAt(i) ^ mac.charCodeAt(i);
  return diff === 0;
}
