/**
 * The streaming export verifier: `ExportVerifier` (push lines in order, `fork` to continue from a
 * prefix, `finish` for the report) and `verifyExport`, the usual way in. Owns the reading of an
 * export and the verdict on it: every line parsed and classified (the header, entries, checkpoint
 * lines; an unreadable line attributed to the chain and seq it most likely held); every entry
 * re-hashed and checked for contiguous seq and prev links; each checkpoint line's shape and
 * signed note checked against the header's gateway; truncation below any checkpoint detected; the
 * `_global` chain required; each chain's anchored size reported and an unanchored tail refused
 * (or, when asked, accepted and counted). The chains' state, the notes and the claims checkpoints make live in
 * ./export-checkpoints.ts. Memory grows by 32 bytes per entry (its hash), never by the entries
 * themselves unless asked to keep some. Must never: call an export valid when any line, entry,
 * link or checkpoint fails, when an entry is under no checkpoint the given keys signed (unless
 * the caller accepts a tail), or trust a field no hash or signature covers.
 */
import { verifyChain } from "./chain.ts";
import { checkpointOrigin } from "./checkpoint.ts";
import { type ChainState, ChainChecks } from "./export-checkpoints.ts";
import {
  type ChainReport,
  EXPORT_VERSION,
  type ExportHeader,
  type ExportReport,
  HEX64,
  isObject,
  type Jwks,
  type Problem,
  short,
  type VerifyOptions,
} from "./export-format.ts";
import { GLOBAL_CHAIN, type LedgerEntry } from "./records.ts";

/**
 * The streaming verifier: `push` each line in order, then `finish` for the report. `fork` copies
 * the state read so far (every chain's hashes, pending checkpoints and problems), so another
 * continuation — an export that grew, or an altered copy — is verified without re-reading the
 * prefix. `verifyExport` is the usual way in.
 */
export class ExportVerifier extends ChainChecks {
  private header: ExportHeader | null = null;
  private n = 0;
  private last = 0;
  private seenFirst = false;
  /** The chain of the last entry or checkpoint line: where an unreadable line most likely belongs. */
  private current: string | null = null;
  /** The problem of an unreadable line, attributed for now to `current`; the next entry settles it (a gap there names the line's chain and seq). */
  private floating: Problem | null = null;
  private warnings = new Set<string>();
  private kept: LedgerEntry[] = [];
  private report: ExportReport | null = null;

  /** Lines pushed so far. */
  get lines(): number {
    return this.n;
  }

  /** The first problem so far (final unless `attributing`). */
  get firstBad(): Problem | undefined {
    return this.problems[0];
  }

  /** Whether an unreadable line still waits for the next entry to name its chain and seq. */
  get attributing(): boolean {
    return this.floating !== null;
  }

  /** A copy of the state read so far; pushing to either leaves the other as it was. */
  fork(): ExportVerifier {
    const f = new ExportVerifier(this.jwks, this.opts);
    f.header = this.header;
    f.gateway = this.gateway;
    f.n = this.n;
    f.last = this.last;
    f.seenFirst = this.seenFirst;
    for (const [name, st] of this.chains) {
      f.chains.set(name, { ...st, hashes: st.hashes.copy(), pending: new Map([...st.pending].map(([k, v]) => [k, [...v]])) });
    }
    f.current = this.current;
    f.problems = this.problems.map((p) => ({ ...p }));
    const i = this.floating ? this.problems.indexOf(this.floating) : -1;
    f.floating = i >= 0 ? f.problems[i]! : this.floating ? { ...this.floating } : null;
    f.warnings = new Set(this.warnings);
    f.absent = new Set(this.absent);
    f.kept = [...this.kept];
    f.notes = this.notes;
    return f;
  }

  /** A line that cannot be read: attributed to the chain it names if known, else the block it sits in, until the next entry tells. */
  private unreadable(text: string, reason: string): void {
    // The envelope's chain, not a body's (a global commitment names the team chain in its body).
    const m = /"chain":"([^"\\]*)"/.exec(text);
    const body = text.indexOf('"body":');
    const named = m && (body < 0 || m.index < body) ? m[1] : undefined;
    const chain = named !== undefined && this.chains.has(named) ? named : this.current;
    const st = chain === null ? undefined : this.chains.get(chain);
    const p: Problem = { chain, seq: st ? st.head.seq + 1 : null, line: this.n, reason };
    this.problem(p);
    this.floating = p;
  }

  /** Reads the next line of the export. */
  async push(raw: string): Promise<void> {
    if (this.report) throw new Error("this verification has finished; fork() before finish() to continue one");
    const n = ++this.n;
    const text = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (text.trim() === "") return;
    this.last = n;
    const first = !this.seenFirst;
    this.seenFirst = true;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      if (first) return this.problem({ chain: null, seq: null, line: n, reason: "the first line is not JSON (an export starts with its header line)" });
      return this.unreadable(text, `line ${n} is not JSON`);
    }
    const keys = isObject(parsed) ? Object.keys(parsed) : [];
    const kind = keys.length === 1 ? keys[0] : undefined;
    const value = kind === undefined ? undefined : (parsed as Record<string, unknown>)[kind];
    if (first) {
      if (kind === "export") return this.readHeader(value, n);
      this.problem({ chain: null, seq: null, line: n, reason: 'the first line is not the export header {"export": {...}}' });
    }
    if (kind === "entry") return this.entry(value, n, text);
    if (kind === "checkpoint") return this.checkpointLine(value, n, text);
    this.unreadable(text, kind === "export" ? `line ${n} is a second export header` : `line ${n} is not an export line ({"entry": …} or {"checkpoint": …})`);
  }

  private async readHeader(h: unknown, n: number): Promise<void> {
    if (
      !isObject(h) ||
      h.v !== EXPORT_VERSION ||
      typeof h.gateway !== "string" ||
      typeof h.generated_at !== "string" ||
      !Array.isArray(h.chains) ||
      !h.chains.every((c) => typeof c === "string")
    ) {
      return this.problem({
        chain: null,
        seq: null,
        line: n,
        reason: `the export header is not {"v": ${EXPORT_VERSION}, "gateway", "generated_at", "chains": [...]}`,
      });
    }
    this.header = { v: h.v, gateway: h.gateway, generated_at: h.generated_at, chains: [...new Set(h.chains as string[])] };
    if (Array.isArray(h.teams) && h.teams.every((t) => typeof t === "string")) this.header.teams = h.teams as string[];
    this.gateway = h.gateway;
    if (this.opts.gateway !== undefined && checkpointOrigin(this.opts.gateway, GLOBAL_CHAIN) !== checkpointOrigin(h.gateway, GLOBAL_CHAIN)) {
      this.problem({
        chain: null,
        seq: null,
        line: n,
        reason: `the export's header names gateway ${h.gateway}, not ${this.opts.gateway} (whose keys these are)`,
      });
    }
    if (!this.header.chains.includes(GLOBAL_CHAIN)) {
      this.problem({
        chain: GLOBAL_CHAIN,
        seq: null,
        line: n,
        reason: `the export's header lists no ${GLOBAL_CHAIN} chain: every export holds the gateway's own chain (it commits every team's checkpoints)`,
      });
    }
    for (const c of this.header.chains) this.state(c);
    this.current = this.header.chains[0] ?? null;
    await this.givenCheckpoints();
  }

  /** The state of an entry's or checkpoint's chain; undefined (and a problem) when the header does not list it. */
  private chainOf(name: unknown, text: string, what: string): ChainState | undefined {
    if (typeof name === "string" && (this.chains.has(name) || this.header === null)) return this.state(name);
    const listed = typeof name === "string" ? `names chain "${name}", which the export header does not list` : "names no chain";
    this.unreadable(text, `${what} on line ${this.n} ${listed}`);
    return undefined;
  }

  private async entry(e: unknown, n: number, text: string): Promise<void> {
    const st = this.chainOf(isObject(e) ? e.chain : undefined, text, "the entry");
    if (!st) return;
    this.current = st.name;
    st.lines++;
    const floating = this.floating;
    this.floating = null;
    if (st.broken) return;
    const seq = isObject(e) ? e.seq : undefined;
    if (floating && typeof seq === "number" && seq > st.head.seq + 1) {
      // The unreadable line was this chain's next entry.
      floating.chain = st.name;
      floating.seq = st.head.seq + 1;
      st.broken = true;
      return;
    }
    const verdict = verifyChain(st.name, [e as LedgerEntry], st.head);
    if (!verdict.ok) {
      this.problem({ chain: st.name, seq: verdict.seq, line: n, reason: verdict.reason });
      st.broken = true;
      return;
    }
    const entry = e as LedgerEntry;
    st.head = verdict.head;
    st.hashes.push(entry.hash);
    if (this.opts.keep?.(entry)) this.kept.push(entry);
    for (const c of st.pending.get(entry.seq) ?? []) this.settle(st, c);
    st.pending.delete(entry.seq);
    if (st.name === GLOBAL_CHAIN) await this.globalEntry(entry, n);
  }

  private async checkpointLine(cp: unknown, n: number, text: string): Promise<void> {
    const st = this.chainOf(isObject(cp) ? cp.chain : undefined, text, "the checkpoint");
    if (!st) return;
    this.current = st.name;
    const c = cp as Record<string, unknown>;
    const bad = (reason: string) => {
      this.problem({ chain: st.name, seq: Number.isSafeInteger(c.size) ? (c.size as number) : null, line: n, reason });
      st.broken = true;
    };
    if (
      !Number.isSafeInteger(c.size) ||
      (c.size as number) < 0 ||
      typeof c.hash !== "string" ||
      !HEX64.test(c.hash) ||
      typeof c.at !== "string" ||
      typeof c.note !== "string"
    ) {
      return bad(`the checkpoint on line ${n} is not {chain, size, hash, at, note}`);
    }
    const size = c.size as number;
    const verdict = await this.verifyNote(c.note);
    if (!verdict.ok) return bad(`the checkpoint at size ${size} does not verify: ${verdict.reason}`);
    if (verdict.size !== size || verdict.hash !== c.hash) {
      return bad(`the checkpoint line says size ${size} and hash ${short(c.hash)}, its signed note says ${verdict.size} and ${short(verdict.hash)}`);
    }
    const other = this.originProblem(verdict.origin, st.name);
    if (other) return bad(`the checkpoint at size ${size} ${other}`);
    this.claim(st, { size, hash: verdict.hash, line: n, what: `the checkpoint on line ${n}` });
  }

  /**
   * Entries after a chain's newest signed checkpoint: no signature covers them, so anyone could
   * have written them (an appended record, or a chain rewritten and re-hashed after its checkpoints
   * were stripped). A problem naming the range, unless `allowUnanchoredTail` accepts it (a warning
   * with the count); never accepted when no signed checkpoint verified at all. Returns the entries
   * accepted.
   */
  private unanchoredTails(): number {
    let accepted = 0;
    let anchoredAny = false;
    let entries = 0;
    for (const st of this.chains.values()) {
      entries += st.head.seq;
      if (st.anchored > 0) anchoredAny = true;
      if (st.broken || st.head.seq <= st.anchored) continue;
      const range = `${st.anchored + 1}..${st.head.seq}`;
      const count = st.head.seq - st.anchored;
      if (this.opts.allowUnanchoredTail) {
        accepted += count;
        this.warnings.add(`accepted an unanchored tail of ${st.name}: seq ${range} (${count} ${count === 1 ? "entry" : "entries"}) under no signed checkpoint`);
        continue;
      }
      this.problem({
        chain: st.name,
        seq: st.anchored + 1,
        line: null,
        reason: `unanchored: entries ${range} of ${st.name} (${count}) are under no checkpoint signed by the given keys, so nothing proves the gateway wrote them (a later export, after the next checkpoint, covers them; --allow-unanchored-tail accepts them knowingly)`,
      });
    }
    if (entries > 0 && !anchoredAny && this.problems.length === 0) {
      this.problem({
        chain: null,
        seq: null,
        line: null,
        reason: "no checkpoint signed by the given keys verified: the export proves nothing about what the gateway wrote",
      });
    }
    return this.problems.length === 0 ? accepted : 0;
  }

  /** The report on everything pushed (truncation below a checkpoint is only visible now). Ends the run: later pushes are refused. */
  finish(): ExportReport {
    if (this.report) return this.report;
    this.floating = null;
    if (!this.seenFirst) this.problem({ chain: null, seq: null, line: null, reason: "the export is empty" });
    for (const st of this.chains.values()) {
      if (st.broken) continue;
      const claims = [...st.pending.values()].flat().sort((a, b) => b.size - a.size);
      const top = claims[0];
      if (top) {
        this.problem({
          chain: st.name,
          seq: st.head.seq + 1,
          line: top.line,
          reason: `truncated: ${top.what} covers ${top.size} entries of ${st.name}, the export holds ${st.head.seq}`,
        });
      }
    }
    if (this.absent.size) {
      const missing = [...this.absent].sort();
      if (this.header && !this.header.teams) {
        // The export claims to be complete: a chain the global chain commits was dropped from it.
        for (const name of missing)
          this.problem({
            chain: name,
            seq: null,
            line: null,
            reason: `the ${GLOBAL_CHAIN} chain commits checkpoints of ${name}, which this unfiltered export does not hold`,
          });
      } else {
        this.warnings.add(`the ${GLOBAL_CHAIN} chain commits checkpoints of chains this team-limited export does not hold: ${missing.join(", ")}`);
      }
    }
    const accepted = this.unanchoredTails();
    const chains: Record<string, ChainReport> = {};
    for (const st of this.chains.values()) {
      chains[st.name] = {
        entries: st.lines,
        head: st.head,
        anchored: st.anchored,
        unanchored: Math.max(0, st.head.seq - st.anchored),
        checkpoints: st.checkpoints,
      };
    }
    const report: ExportReport = {
      ok: this.problems.length === 0,
      header: this.header,
      chains,
      problems: this.problems,
      warnings: [...this.warnings],
      lines: this.last,
      unanchoredAccepted: accepted,
    };
    if (this.problems[0]) report.firstBad = this.problems[0];
    if (this.opts.keep) report.kept = this.kept;
    this.report = report;
    return report;
  }
}

/**
 * Verifies an export, line by line (an array, or any async iterable such as a file or an HTTP
 * body split into lines), against the gateway's public keys.
 */
export async function verifyExport(lines: string[] | Iterable<string> | AsyncIterable<string>, jwks: Jwks, opts: VerifyOptions = {}): Promise<ExportReport> {
  const v = new ExportVerifier(jwks, opts);
  const every = opts.progressEvery ?? 10_000;
  for await (const raw of lines) {
    await v.push(raw);
    if (opts.onProgress && v.lines % every === 0) opts.onProgress(v.lines);
  }
  return v.finish();
}
