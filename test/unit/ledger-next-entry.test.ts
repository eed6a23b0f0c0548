/**
 * The LedgerDO's fast path (`nextEntry`, hashing a body already in canonical form) yields exactly
 * the entry and hash of the general rule (`chainEntries`, canonicalising the whole entry), for
 * arbitrary bodies, ids and times — so exports stay verifiable by any RFC 8785 verifier.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { chainEntries, EMPTY_HEAD, entryHash, nextEntry } from "../../src/ledger/chain.ts";
import { canonicalJson } from "../../src/wire/canonical.ts";
import type { EntryDraft } from "../../src/ledger/records.ts";
import type { JsonObject } from "../../src/wire/jsonrpc.ts";

const jsonValue = fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.parse(JSON.stringify(v)) as unknown);
const body = fc.dictionary(fc.string({ unit: "grapheme", maxLength: 12 }), jsonValue, { maxKeys: 6 }) as fc.Arbitrary<JsonObject>;
const draft = fc.record({
  kind: fc.constantFrom("decision", "outcome", "blocked", "tools.listed"),
  id: fc.string({ unit: "grapheme", minLength: 1, maxLength: 40 }),
  at: fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
  body,
}) as fc.Arbitrary<EntryDraft>;

describe("nextEntry", () => {
  it("equals chainEntries entry by entry, hash included", () => {
    fc.assert(
      fc.property(fc.array(draft, { minLength: 1, maxLength: 8 }), fc.constantFrom("team-a", "_global", "x.y:z-1"), (drafts, chain) => {
        const general = chainEntries(chain, EMPTY_HEAD, drafts);
        let head = EMPTY_HEAD;
        drafts.forEach((d, i) => {
          const fast = nextEntry(chain, head, d, canonicalJson(d.body));
          expect(fast).toEqual(general[i]);
          expect(fast.hash).toBe(entryHash(fast));
          head = { seq: fast.seq, hash: fast.hash };
        });
      }),
      { numRuns: 400 },
    );
  });
});
