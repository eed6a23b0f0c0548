/**
 * The chain rule, as pure functions: how drafts become entries after a head (contiguous seq,
 * prev = the previous entry's hash, hash over the canonical entry without its own hash), and
 * how a sequence of entries is checked against that rule. Used by the LedgerDO (inside one
 * synchronous transaction) and by the offline verifier. Must never: renumber, reorder or skip.
 */
import { canonicalHash, sha256Hex } from "../wire/canonical.ts";
import { ENTRY_VERSION, type EntryDraft, GENESIS, type LedgerEntry } from "./records.ts";

/** The newest entry of a chain, or the empty chain. */
export interface Head {
  seq: number;
  hash: string;
}
export const EMPTY_HEAD: Head = { seq: 0, hash: GENESIS };

/** The hash an entry must carry: SHA-256 over the RFC 8785 JSON of every field but `hash`. */
export function entryHash(e: Omit<LedgerEntry, "hash"> | LedgerEntry): string {
  const { hash: _omit, ...rest } = e as LedgerEntry;
  return canonicalHash(rest);
}

/** Chains `drafts` after `head`, in order. */
export function chainEntries(chain: string, head: Head, drafts: EntryDraft[]): LedgerEntry[] {
  const out: LedgerEntry[] = [];
  let prev = head;
  for (const d of drafts) {
    const base = { v: ENTRY_VERSION, chain, seq: prev.seq + 1, prev: prev.hash, kind: d.kind, id: d.id, at: d.at, body: d.body };
    const entry: LedgerEntry = { ...base, hash: entryHash(base) };
    out.push(entry);
    prev = { seq: entry.seq, hash: entry.hash };
  }
  return out;
}

/**
 * The next entry after `head` for a draft whose body is already in canonical form (`bodyText`,
 * RFC 8785 of `draft.body`): the same entry and hash as chainEntries, without canonicalising
 * the body a second time. The envelope's members are written in their canonical order (at, body,
 * chain, id, kind, prev, seq, v); strings are serialised as RFC 8785 does (JSON.stringify).
 * `sha256` must be SHA-256 of the UTF-8 text as lowercase hex (as sha256Hex); a runtime may pass
 * a native one (the LedgerDO passes node:crypto's).
 */
export function nextEntry(chain: string, head: Head, draft: EntryDraft, bodyText: string, sha256: (text: string) => string = sha256Hex): LedgerEntry {
  const seq = head.seq + 1;
  const text = `{"at":${JSON.stringify(draft.at)},"body":${bodyText},"chain":${JSON.stringify(chain)},"id":${JSON.stringify(draft.id)},"kind":${JSON.stringify(draft.kind)},"prev":${JSON.stringify(head.hash)},"seq":${seq},"v":${ENTRY_VERSION}}`;
  return { v: ENTRY_VERSION, chain, seq, prev: head.hash, kind: draft.kind, id: draft.id, at: draft.at, body: draft.body, hash: sha256(text) };
}

export type ChainVerdict = { ok: true; head: Head; count: number } | { ok: false; seq: number; reason: string };

const HEX64 = /^[0-9a-f]{64}$/;

/** Why `e` is not an entry envelope at all (wrong field types); null when its shape is right. */
export function entryShapeProblem(e: unknown): string | null {
  if (typeof e !== "object" || e === null || Array.isArray(e)) return "not an entry object";
  const x = e as Record<string, unknown>;
  if (typeof x.chain !== "string") return "chain is not a string";
  if (!Number.isSafeInteger(x.seq) || (x.seq as number) < 1) return "seq is not a positive integer";
  if (typeof x.prev !== "string" || !HEX64.test(x.prev)) return "prev is not 64 lowercase hex digits";
  if (typeof x.hash !== "string" || !HEX64.test(x.hash)) return "hash is not 64 lowercase hex digits";
  if (typeof x.kind !== "string" || typeof x.id !== "string" || typeof x.at !== "string") return "kind, id and at must be strings";
  if (typeof x.body !== "object" || x.body === null || Array.isArray(x.body)) return "body is not an object";
  return null;
}

/**
 * Checks entries of one chain, in order, starting after `from` (the empty chain by default):
 * shape, version, chain name, contiguous seq, prev links and every hash. The first problem wins;
 * its `seq` is the position that fails (the seq the next entry should have had), so a missing or
 * swapped entry is named by the first seq that is not where it belongs.
 */
export function verifyChain(chain: string, entries: LedgerEntry[], from: Head = EMPTY_HEAD): ChainVerdict {
  let head = from;
  for (const e of entries) {
    const seq = head.seq + 1;
    const shape = entryShapeProblem(e);
    if (shape) return { ok: false, seq, reason: `malformed entry: ${shape}` };
    if (e.v !== ENTRY_VERSION) return { ok: false, seq, reason: `unknown entry version ${String(e.v)}` };
    if (e.chain !== chain) return { ok: false, seq, reason: `entry belongs to chain "${e.chain}", not "${chain}"` };
    if (e.seq !== seq) return { ok: false, seq, reason: `expected seq ${seq}, found seq ${e.seq}: entries are missing or out of order` };
    if (e.prev !== head.hash) return { ok: false, seq, reason: "prev does not match the previous entry's hash" };
    let expected: string;
    try {
      expected = entryHash(e);
    } catch (err) {
      return { ok: false, seq, reason: `entry cannot be canonicalised (${(err as Error).message})` };
    }
    if (e.hash !== expected) return { ok: false, seq, reason: "hash does not match the entry's content" };
    head = { seq: e.seq, hash: e.hash };
  }
  return { ok: true, head, count: entries.length };
}
