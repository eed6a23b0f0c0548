/**
 * The ledger export format (NDJSON, docs/ledger.md) and the verifier's report types: the header
 * line and its version, the line shapes, the per-chain report, problems, options, the JWKS the
 * verifier takes, and `ndjsonLines`, which splits a byte or text stream into lines holding at most
 * one line in memory. Also the small shape helpers the verifier and receipts share (`isObject`,
 * `HEX64`, `short`). Owns no verdict: it checks nothing and keeps no state. Imports only ledger
 * code. Must never: hold more than one line of a stream, or change a field's meaning without a
 * new `EXPORT_VERSION`.
 */
import type { Checkpoint } from "./checkpoint.ts";
import type { Head } from "./chain.ts";
import type { LedgerEntry } from "./records.ts";

/** Version of the export format (the header's `v`). */
export const EXPORT_VERSION = 1;

/** The first line of an export: `{"export": ExportHeader}`. */
export interface ExportHeader {
  v: number;
  /** The gateway's canonical URL: checkpoint origins are `checkpointOrigin(gateway, chain)`. */
  gateway: string;
  generated_at: string;
  /** The chains this export holds (team chains, and `_global`). */
  chains: string[];
  /** Present when the export was limited to some teams (an auditor's, or `?team=`): chains `_global` commits outside these were left out on purpose. */
  teams?: string[];
}

/** One line of an export. */
export type ExportLine = { export: ExportHeader } | { entry: LedgerEntry } | { checkpoint: Checkpoint };

/** What the export holds of one chain. */
export interface ChainReport {
  /** Entry lines of this chain. */
  entries: number;
  /** The last entry that verified (seq 0 and the genesis hash when none did). */
  head: Head;
  /** The largest size a verified signed checkpoint covers (0 when none). */
  anchored: number;
  /** Entries after the anchored size: chained, but no signature covers them yet. */
  unanchored: number;
  /** Signed checkpoints that verified and matched an entry (checkpoint lines and global commitments). */
  checkpoints: number;
}

/** One problem: where (chain and seq when known, the line) and why. */
export interface Problem {
  chain: string | null;
  seq: number | null;
  line: number | null;
  reason: string;
}

export interface ExportReport {
  ok: boolean;
  header: ExportHeader | null;
  chains: Record<string, ChainReport>;
  /** The first problem found, in line order (problems only visible at the end, like truncation, come last). */
  firstBad?: Problem;
  /** Every problem found, at most 100; a chain's entries after its first problem are not checked further. */
  problems: Problem[];
  /** Things that do not make the export invalid but a reader should know (a team-filtered export, another origin). */
  warnings: string[];
  /** Lines read (up to the last non-empty one). */
  lines: number;
  /** Entries accepted under `allowUnanchoredTail` (0 when none, or when the option is off). */
  unanchoredAccepted: number;
  /** Entries kept by `opts.keep`, when given. */
  kept?: LedgerEntry[];
}

export interface VerifyOptions {
  /** Called every `progressEvery` lines (default 10,000) with the number of lines read. */
  onProgress?(lines: number): void;
  progressEvery?: number;
  /** Checkpoints saved earlier (signed notes, or Checkpoint objects): the export must contain the entries they cover. */
  checkpoints?: (string | Checkpoint)[];
  /** Entries to keep in `report.kept` (for receipts). */
  keep?(entry: LedgerEntry): boolean;
  /**
   * Accept entries after a chain's last signed checkpoint (reported in `warnings` with their
   * count). Off by default: VALID then means every entry of every chain is under a checkpoint the
   * given keys signed. Never accepts an export in which no signed checkpoint verified at all.
   */
  allowUnanchoredTail?: boolean;
  /** The gateway the keys belong to (its URL): the header must name it. Without it the header's gateway is checked against the signed origins only. */
  gateway?: string;
}

/** The gateway's public keys, as a JWKS. */
export type Jwks = { keys: (JsonWebKey & { kid?: string })[] };

export const HEX64 = /^[0-9a-f]{64}$/;
export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
export const short = (hash: string) => `${hash.slice(0, 12)}…`;

/** Splits a byte or text stream (a file, an HTTP body) into lines, without holding more than one line. */
export async function* ndjsonLines(chunks: AsyncIterable<Uint8Array | string>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let rest = "";
  for await (const chunk of chunks) {
    rest += typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true });
    let start = 0;
    for (let i = rest.indexOf("\n"); i >= 0; i = rest.indexOf("\n", start)) {
      yield rest.slice(start, i);
      start = i + 1;
    }
    rest = rest.slice(start);
  }
  rest += decoder.decode();
  if (rest !== "") yield rest;
}
