/**
 * Receipts: `receiptFrom` finds the receipt {chain, seq, hash, decision_id} in a value (a receipt,
 * a tool result's `_meta["portcullis/receipt"]`, or a JSON-RPC response carrying one), and
 * `verifyReceipt` checks it against the report of a verified export and the entries kept from it.
 * Reads no export itself and verifies no signature: it trusts only a report whose `ok` is true.
 * Must never: accept a receipt when the export did not verify, when the entry at its seq is
 * missing, has another hash, belongs to another decision, or is under no signed checkpoint (an
 * unanchored tail accepted by `allowUnanchoredTail` proves no receipt).
 */
import { entryShapeProblem } from "./chain.ts";
import { type ExportReport, HEX64, isObject, short } from "./export-format.ts";
import type { ChainReceipt, LedgerEntry } from "./records.ts";

/** The receipt in `value`: a receipt itself, a tool result carrying `_meta["portcullis/receipt"]`, or a JSON-RPC response with one. */
export function receiptFrom(value: unknown): ChainReceipt | null {
  const candidates = [value, isObject(value) ? (value._meta as Record<string, unknown> | undefined)?.["portcullis/receipt"] : undefined];
  if (isObject(value) && isObject(value.result)) candidates.push((value.result._meta as Record<string, unknown> | undefined)?.["portcullis/receipt"]);
  for (const c of candidates) {
    if (
      isObject(c) &&
      typeof c.chain === "string" &&
      Number.isSafeInteger(c.seq) &&
      (c.seq as number) >= 1 &&
      typeof c.hash === "string" &&
      HEX64.test(c.hash) &&
      typeof c.decision_id === "string"
    ) {
      return { chain: c.chain, seq: c.seq as number, hash: c.hash, decision_id: c.decision_id };
    }
  }
  return null;
}

/** `anchored` is always true when `ok`: a receipt is proven only under a signed checkpoint (kept for readers of the JSON report). */
export type ReceiptVerdict = { ok: true; chain: string; seq: number; kind: string; anchored: true } | { ok: false; reason: string };

/**
 * Checks a receipt against a verified export: the export verifies, it holds the receipt's chain
 * up to its seq, and the entry there has the receipt's hash and is the decision's (its id) or one
 * of its records (`body.decision_id`, e.g. the outcome), and a checkpoint signed by the given
 * keys covers it. `entries` must include that entry (verifyExport's `keep`; the report's `kept` by
 * default). A receipt for a record that was removed, changed, or appended after the last signed
 * checkpoint does not verify.
 */
export function verifyReceipt(receipt: unknown, report: ExportReport, entries: Iterable<LedgerEntry> = report.kept ?? []): ReceiptVerdict {
  const r = receiptFrom(receipt);
  if (!r) return { ok: false, reason: "not a receipt {chain, seq, hash, decision_id}" };
  if (!report.ok) {
    const b = report.firstBad;
    return {
      ok: false,
      reason: `the export does not verify${b ? ` (${b.chain ?? "export"}${b.seq !== null ? ` seq ${b.seq}` : ""}: ${b.reason})` : ""}, so it proves no receipt`,
    };
  }
  const chain = report.chains[r.chain];
  if (!chain) return { ok: false, reason: `this export does not hold chain ${r.chain}` };
  if (r.seq > chain.head.seq) return { ok: false, reason: `the export holds ${chain.head.seq} entries of ${r.chain}: the record at seq ${r.seq} is not in it` };
  let entry: LedgerEntry | undefined;
  for (const e of entries) {
    if (e.chain === r.chain && e.seq === r.seq) {
      entry = e;
      break;
    }
  }
  if (!entry) return { ok: false, reason: `the entry ${r.chain} seq ${r.seq} was not kept from the export (verifyExport's keep option)` };
  if (entry.hash !== r.hash)
    return {
      ok: false,
      reason: `the entry at ${r.chain} seq ${r.seq} has hash ${short(entry.hash)}, the receipt says ${short(r.hash)}: the record was changed or replaced`,
    };
  if (entry.id !== r.decision_id && entry.body.decision_id !== r.decision_id) {
    return { ok: false, reason: `the entry at ${r.chain} seq ${r.seq} is not a record of decision ${r.decision_id}` };
  }
  if (entryShapeProblem(entry)) return { ok: false, reason: "the kept entry is malformed" };
  if (r.seq > chain.anchored) {
    // A hash chain proves only that the file is consistent with itself: whoever wrote the file
    // could have appended this record. Only the gateway's signature over a checkpoint covering it
    // says the gateway wrote it.
    return {
      ok: false,
      reason: `the entry ${r.chain} seq ${r.seq} is not under a signed checkpoint (the export's checkpoints cover ${chain.anchored} entries of ${r.chain}): nothing the gateway signed proves it; verify a later export`,
    };
  }
  return { ok: true, chain: r.chain, seq: r.seq, kind: entry.kind, anchored: true };
}
