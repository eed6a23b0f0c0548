/**
 * Offline verification of a ledger export (NDJSON, docs/ledger.md): the entry point, shared by the
 * CLI (bin/ledger-cli.mjs, in Node) and the gateway (workerd). It only re-exports, for bin/ledger-cli.mjs, which loads
 * this file by path: verifyExport (export-verifier.ts), ndjsonLines (export-format.ts) and the
 * receipt check (receipt.ts); src/ and test/ import those modules directly. Must never: hold logic
 * of its own, or drop or rename a name the CLI relies on.
 */
export { verifyExport } from "./export-verifier.ts";
export { ndjsonLines } from "./export-format.ts";
export { receiptFrom, verifyReceipt } from "./receipt.ts";
