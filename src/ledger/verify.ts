/**
 * Offline verification of a ledger export (NDJSON, docs/ledger.md): the entry point, shared by the
 * CLI (cli/ledger.ts, in Node) and the gateway (workerd). It only re-exports: the format,
 * report types and line splitting from export-format.ts, the streaming verifier from
 * export-verifier.ts, and receipts from receipt.ts. Must never: hold logic of its own, or drop or
 * rename a name its importers rely on.
 */
export { ExportVerifier, verifyExport } from "./export-verifier.ts";
export type { ChainReport, ExportHeader, ExportLine, ExportReport, Problem, VerifyOptions } from "./export-format.ts";
export { EXPORT_VERSION, ndjsonLines } from "./export-format.ts";
export type { ReceiptVerdict } from "./receipt.ts";
export { receiptFrom, verifyReceipt } from "./receipt.ts";
