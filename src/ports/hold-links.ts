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
import type { HoldRecord } from "../../durable-objects/contract-holds.ts";
import { labelledMac, sameMac } from "../identity/secret-mac.ts";

export type LinkDecision = "approve" | "reject";

type LinkFacts = Pick<HoldRecord, "id" | "actionHash" | "expiresAt">;

/** The MAC of a decision link for `hold` (never the secret: a key derived from it under its own label). */
export function holdLinkMac(secret: string, hold: LinkFacts, decision: LinkDecision): string {
  return labelledMac(secret, "portcullis hold link v1", `${hold.id}\n${decision}\n${hold.actionHash}\n${hold.expiresAt}`);
}

/** The link that opens `pageUrl` (the hold's console page) with `decision` proposed. */
export function holdLink(secret: string, pageUrl: string, hold: LinkFacts, decision: LinkDecision): string {
  return `${pageUrl}?decide=${decision}&link=${holdLinkMac(secret, hold, decision)}`;
}

/** Whether `mac` is this hold's link for `decision` (constant time over the expected length). */
export function holdLinkValid(secret: string, hold: LinkFacts, decision: LinkDecision, mac: string | null | undefined): boolean {
  return sameMac(holdLinkMac(secret, hold, decision), mac);
}
