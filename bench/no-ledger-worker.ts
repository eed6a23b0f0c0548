/**
 * Bench only (`npm run bench`): the production Worker (src/index.ts, unchanged, same build) with
 * its `LEDGER` binding replaced by a no-op namespace whose chains confirm every append at once,
 * in memory, without a Durable Object round trip, a transaction or a hash. Comparing it with
 * Portcullis in the same run gives what a governed tools/call pays for its two ledger appends
 * (decision before forwarding, outcome before answering). The seam is the Worker's env: every
 * ledger write goes through durable-objects/object-names.ts `ledgerObject(env, chain)`, so nothing in
 * src/ changes. Must never be deployed: it keeps no audit trail at all.
 */
import type { LedgerEntry } from "../src/ledger/records.ts";
import app from "../src/index.ts";

export { ConfigDO, CredentialsDO, HistoryDO, HoldsDO, KillSwitchDO, LedgerDO, RevocationsDO, RoundsDO, SessionDO, SseDO, TasksDO } from "../src/index.ts";

const ZERO_HASH = "0".repeat(64);

/** One chain that forgets: numbers the drafts and hands them back as if stored. */
class NoLedgerChain {
  private seq = 0;
  constructor(private readonly chain: string) {}
  async append(drafts: { kind: string; id: string; at: string; body: Record<string, unknown> }[]): Promise<LedgerEntry[]> {
    return drafts.map((d) => ({ v: 1, chain: this.chain, seq: ++this.seq, prev: ZERO_HASH, hash: ZERO_HASH, ...d }) as LedgerEntry);
  }
  /** What the Worker's group commit (src/ports/ledger-batch.ts) calls: each call answered as `append` would. */
  async appendEach(calls: { kind: string; id: string; at: string; body: Record<string, unknown> }[][]): Promise<{ entries: LedgerEntry[] }[]> {
    return Promise.all(calls.map(async (c) => ({ entries: await this.append(c) })));
  }
}

const chains = new Map<string, NoLedgerChain>();

/** The subset of DurableObjectNamespace that names.ts uses (idFromName, get). */
const noLedger = {
  idFromName: (name: string) => ({ name, toString: () => name }),
  get(id: { name: string }) {
    const chain = id.name.startsWith("chain:") ? id.name.slice("chain:".length) : id.name;
    let c = chains.get(chain);
    if (!c) {
      c = new NoLedgerChain(chain);
      chains.set(chain, c);
    }
    return c;
  },
} as unknown as DurableObjectNamespace;

export default {
  fetch(req: Request, env: Record<string, unknown>, ctx: ExecutionContext): Response | Promise<Response> {
    return app.fetch(req, { ...env, LEDGER: noLedger }, ctx);
  },
};
