/**
 * The chain side of export verification, the base the streaming `ExportVerifier`
 * (./export-verifier.ts) reads lines into: each chain's state (its head, and its entries' hashes
 * at 32 bytes each), the problems found, each signed checkpoint note verified once against the
 * given public keys, the checkpoints the caller gave, the global chain's commitments matched to
 * the team chains they name, and every checkpoint's claim settled against the entry at its size
 * now or when that entry is read. Must never: read or parse export lines (the verifier does),
 * settle a claim against anything but the re-hashed entry at its size, or trust a note whose
 * signature does not verify.
 */
import { EMPTY_HEAD, type Head } from "./chain.ts";
import { checkpointOrigin, type NoteVerdict, verifyCheckpoint } from "./checkpoint.ts";
import { type Jwks, type Problem, short, type VerifyOptions } from "./export-format.ts";
import { GENESIS, GLOBAL_CHAIN, type LedgerEntry } from "./records.ts";

const MAX_PROBLEMS = 100;

/** Entry hashes by seq, 32 bytes each. */
class Hashes {
  private buf = new Uint8Array(32 * 256);
  private n = 0;
  push(hex: string): void {
    if ((this.n + 1) * 32 > this.buf.length) {
      const grown = new Uint8Array(this.buf.length * 2);
      grown.set(this.buf);
      this.buf = grown;
    }
    const o = this.n * 32;
    for (let i = 0; i < 32; i++) this.buf[o + i] = Number.parseInt(hex.slice(i * 2, i * 2 + 2), 16);
    this.n++;
  }
  copy(): Hashes {
    const h = new Hashes();
    h.buf = this.buf.slice();
    h.n = this.n;
    return h;
  }
  /** The hash of entry `seq` (1-based); GENESIS for 0. */
  at(seq: number): string {
    if (seq === 0) return GENESIS;
    let s = "";
    for (let i = (seq - 1) * 32; i < seq * 32; i++) s += this.buf[i]!.toString(16).padStart(2, "0");
    return s;
  }
}

/** A signed statement that entry `size` of a chain has hash `hash`. */
export interface Claim {
  size: number;
  hash: string;
  line: number | null;
  what: string;
}

export interface ChainState {
  name: string;
  lines: number;
  head: Head;
  hashes: Hashes;
  /** A problem was found: later entries of this chain are counted, not checked. */
  broken: boolean;
  anchored: number;
  checkpoints: number;
  /** Claims about entries not read yet, by size. */
  pending: Map<number, Claim[]>;
}

/** The chains of one verification and the checkpoint claims on them; `ExportVerifier` reads the lines. */
export class ChainChecks {
  protected chains = new Map<string, ChainState>();
  protected problems: Problem[] = [];
  protected absent = new Set<string>();
  /** Notes verified in this run: each team checkpoint comes twice (its own line, and the global chain's commitment). */
  protected notes = new Map<string, Promise<NoteVerdict>>();
  protected readonly jwks: Jwks;
  protected readonly opts: VerifyOptions;
  /** The gateway the export's header names (null until it is read): every signed origin must be this gateway's. */
  protected gateway: string | null = null;

  constructor(jwks: Jwks, opts: VerifyOptions = {}) {
    this.jwks = jwks;
    this.opts = opts;
  }

  /**
   * Why a verified note's origin is not this export's chain `chain` of the header's gateway, or
   * null. A note names its gateway inside the signed text, so a header that names another gateway
   * (or a note lifted from another gateway with the same key) is a forgery, not a warning.
   */
  protected originProblem(origin: string, chain: string): string | null {
    if (!origin.endsWith(`/ledger/${chain}`)) return `is signed for origin ${origin}, not chain ${chain}`;
    if (this.gateway !== null && origin !== checkpointOrigin(this.gateway, chain)) {
      return `is signed for origin ${origin}, not ${checkpointOrigin(this.gateway, chain)}: the export's header names gateway ${this.gateway}, the signature another`;
    }
    return null;
  }

  protected problem(p: Problem): void {
    if (this.problems.length < MAX_PROBLEMS) this.problems.push(p);
  }

  protected verifyNote(note: unknown): Promise<NoteVerdict> {
    if (typeof note !== "string") return verifyCheckpoint(note as string, this.jwks);
    let v = this.notes.get(note);
    if (!v) {
      v = verifyCheckpoint(note, this.jwks);
      this.notes.set(note, v);
    }
    return v;
  }

  protected state(name: string): ChainState {
    let st = this.chains.get(name);
    if (!st) {
      st = { name, lines: 0, head: EMPTY_HEAD, hashes: new Hashes(), broken: false, anchored: 0, checkpoints: 0, pending: new Map() };
      this.chains.set(name, st);
    }
    return st;
  }

  /** The checkpoints the caller saved earlier: verified once, then claims like any other. */
  protected async givenCheckpoints(): Promise<void> {
    for (const [i, given] of (this.opts.checkpoints ?? []).entries()) {
      const note = typeof given === "string" ? given : given?.note;
      const what = `the checkpoint you gave (#${i + 1})`;
      const verdict = await this.verifyNote(note);
      if (!verdict.ok) {
        this.problem({ chain: null, seq: null, line: null, reason: `${what} does not verify: ${verdict.reason}` });
        continue;
      }
      const chain = typeof given === "string" ? /\/ledger\/([^/]+)$/.exec(verdict.origin)?.[1] : given.chain;
      if (chain === undefined || !verdict.origin.endsWith(`/ledger/${chain}`)) {
        this.problem({ chain: chain ?? null, seq: null, line: null, reason: `${what} is signed for origin ${verdict.origin}, not a ledger chain` });
        continue;
      }
      const other = this.originProblem(verdict.origin, chain);
      if (other) {
        this.problem({ chain, seq: null, line: null, reason: `${what} ${other}` });
        continue;
      }
      if (!this.chains.has(chain)) {
        this.problem({ chain, seq: null, line: null, reason: `${what} covers ${verdict.size} entries of chain ${chain}, which this export does not hold` });
        continue;
      }
      this.claim(this.state(chain), { size: verdict.size, hash: verdict.hash, line: null, what });
    }
  }

  /** A global chain entry commits a team chain's signed checkpoint: verify the note, then claim it on that chain. */
  protected async globalEntry(e: LedgerEntry, n: number): Promise<void> {
    const bad = (reason: string) => this.problem({ chain: GLOBAL_CHAIN, seq: e.seq, line: n, reason });
    const b = e.body;
    // The gateway's own config and kill switch are no team's: their config.changed and killswitch.changed records live here too, chained like the rest.
    if (e.kind === "config.changed" || e.kind === "killswitch.changed") return;
    if (e.kind !== "checkpoint")
      return bad(`a ${GLOBAL_CHAIN} entry must be a checkpoint commitment, a config.changed or a killswitch.changed record, not "${e.kind}"`);
    if (typeof b.chain !== "string" || b.chain === GLOBAL_CHAIN || !Number.isSafeInteger(b.size) || typeof b.hash !== "string" || typeof b.note !== "string") {
      return bad("a checkpoint commitment's body is {chain, size, hash, note}");
    }
    const size = b.size as number;
    const verdict = await this.verifyNote(b.note);
    if (!verdict.ok) return bad(`the committed checkpoint of ${b.chain} at size ${size} does not verify: ${verdict.reason}`);
    if (verdict.size !== size || verdict.hash !== b.hash) return bad(`the committed size and hash of ${b.chain} differ from its signed note`);
    const other = this.originProblem(verdict.origin, b.chain);
    if (other) return bad(`the committed note of ${b.chain} ${other}`);
    const target = this.chains.get(b.chain);
    if (!target) {
      this.absent.add(b.chain);
      return;
    }
    this.claim(target, { size, hash: verdict.hash, line: n, what: `the ${GLOBAL_CHAIN} commitment at seq ${e.seq}` });
  }

  /** Checks a claim now if its entry was read, or when it is. */
  protected claim(st: ChainState, c: Claim): void {
    if (c.size <= st.head.seq) {
      this.settle(st, c);
      return;
    }
    if (st.broken) return;
    const list = st.pending.get(c.size);
    if (list) list.push(c);
    else st.pending.set(c.size, [c]);
  }

  protected settle(st: ChainState, c: Claim): void {
    const actual = st.hashes.at(c.size);
    if (actual !== c.hash) {
      const reason = `${c.what} signs entry ${c.size} with hash ${short(c.hash)}, the export's entry ${c.size} has ${short(actual)}: entries up to seq ${c.size} differ from what was signed`;
      this.problem({ chain: st.name, seq: c.size, line: c.line, reason });
      st.broken = true;
      return;
    }
    st.checkpoints++;
    if (c.size > st.anchored) st.anchored = c.size;
  }
}
