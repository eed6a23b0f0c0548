/**
 * Bench only (`npm run bench`): the production LedgerDO (durable-objects/ledger.ts, unchanged) on
 * the production runtime (workerd via wrangler dev), driven from inside this Worker so that the
 * numbers are the chain's and not wrangler's HTTP plumbing. `POST /appends?chain=C&n=N&c=K&via=V` makes
 * N one-draft appends to chain C with K in flight — `via=gateway` (default) through the gateway's
 * own append path (src/ports/ledger-batch.ts), `via=rpc` one RPC per append — and answers the elapsed time and the chain's
 * counters from `status()` before and after (its transaction counter gives the group-commit
 * factor); `POST /floor?n=N&c=K` runs the same loop against EchoDO, whose `append` hands the
 * drafts back and stores nothing (the Durable Object RPC floor under the chain's number);
 * `POST /pairs?chain=C&n=N` makes N sequential decision + outcome pairs (what one governed call
 * writes, through the gateway's append path) and answers each pair's latency; `POST /status?chain=C` the counters. Owns nothing of
 * the gateway; must never be deployed, be bound to a real D1 database, or grow endpoints into
 * src/ (the production Worker).
 */
import { DurableObject } from "cloudflare:workers";
import { ledgerObject } from "../durable-objects/object-names.ts";
import type { LedgerApi, LedgerSigning, LedgerStatus } from "../durable-objects/contract-ledger.ts";
import type { Env } from "../src/env.ts";
import type { EntryDraft, LedgerEntry } from "../src/ledger/records.ts";
import { batchedAppend } from "../src/ports/ledger-batch.ts";
import { LEDGER_WRITE_TIMEOUT_MS } from "../src/ports/ledger-writer.ts";

export { LedgerDO } from "../durable-objects/ledger.ts";

/** The RPC floor: LedgerDO's append signature and payload both ways, no work, no storage. */
export class EchoDO extends DurableObject {
  async append(drafts: EntryDraft[], _signing: LedgerSigning): Promise<EntryDraft[]> {
    return drafts;
  }
}

/** Bounds of one request (the bench asks for far less). */
const MAX_APPENDS = 20_000;
const MAX_IN_FLIGHT = 1_000;

/** A decision record shaped like the one src/ports/ledger-writer.ts writes for test_simple_text. */
function decision(): EntryDraft {
  return {
    kind: "decision",
    id: crypto.randomUUID(),
    at: new Date().toISOString(),
    body: {
      principal: "local:bench",
      team: "bench",
      run: crypto.randomUUID(),
      upstream: "conf",
      tool: "test_simple_text",
      arguments: { sha256: "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" },
      arguments_mode: "hashed",
      classification: { effect: "read", blast_radius: "self", source: "default" },
      decision: "allow",
      rule: null,
      reason: "transparent mode",
      mode: "transparent",
      policy_version: "bench",
      obligations: [],
      hold_id: null,
    },
  };
}

function outcome(decisionId: string): EntryDraft {
  return {
    kind: "outcome",
    id: crypto.randomUUID(),
    at: new Date().toISOString(),
    body: {
      decision_id: decisionId,
      status: "succeeded",
      result_hash: "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8",
      duration_ms: 1,
      obligations_applied: [],
      reason: null,
    },
  };
}

function intParam(url: URL, name: string, max: number): number {
  const n = Number(url.searchParams.get(name));
  if (!Number.isInteger(n) || n < 1 || n > max) throw new Error(`${name} must be an integer in 1..${max}`);
  return n;
}

/** The counters a bench reads from one status(). */
const counters = (s: LedgerStatus) => ({
  seq: s.head.seq,
  transactions: s.transactions,
  appends: s.appends,
  rpcs: s.rpcs,
  checkpointSize: s.checkpointSize,
  flushedSeq: s.flushedSeq,
  checkpointProblem: s.checkpointProblem,
});

type AppendOne = (d: EntryDraft) => Promise<LedgerEntry[] | EntryDraft[]>;

/** N one-draft appends through `append` with `inFlight` of them in flight: elapsed ms and failures. */
async function drive(append: AppendOne, n: number, inFlight: number) {
  let next = 0;
  let failed = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(inFlight, n) }, async () => {
      while (next++ < n) {
        const d = decision();
        const [entry] = await append(d).catch(() => []);
        if (!entry || entry.id !== d.id) failed++;
      }
    }),
  );
  return { ms: performance.now() - t0, failed };
}

/**
 * `via=gateway`: the path every gateway append takes (src/ports/ledger-batch.ts, this isolate's group
 * commit in front of the object's); `via=rpc`: one `append` RPC per draft straight to the object.
 */
async function appends(env: Env, chain: string, ledger: LedgerApi, signing: LedgerSigning, n: number, inFlight: number, via: string) {
  const one: AppendOne = via === "rpc" ? (d) => ledger.append([d], signing) : (d) => batchedAppend(env, chain, signing, [d], LEDGER_WRITE_TIMEOUT_MS);
  const before = counters(await ledger.status());
  const run = await drive(one, n, inFlight);
  return { ...run, before, after: counters(await ledger.status()) };
}

async function pairs(env: Env, chain: string, signing: LedgerSigning, n: number) {
  const ms: number[] = [];
  const start = performance.now();
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const d = decision();
    const [entry] = await batchedAppend(env, chain, signing, [d], LEDGER_WRITE_TIMEOUT_MS);
    if (!entry || entry.id !== d.id) throw new Error("the decision was not confirmed");
    const [out] = await batchedAppend(env, chain, signing, [outcome(d.id)], LEDGER_WRITE_TIMEOUT_MS);
    if (!out) throw new Error("the outcome was not confirmed");
    ms.push(performance.now() - t0);
  }
  return { ms, total: performance.now() - start };
}

export default {
  async fetch(req: Request, env: Env): Promise<Response> {
    const url = new URL(req.url);
    if (req.method === "GET" && url.pathname === "/") return Response.json({ ok: true });
    if (req.method !== "POST") return Response.json({ error: "not found" }, { status: 404 });
    try {
      if (url.pathname === "/floor") {
        const echo = env.ECHO as DurableObjectNamespace;
        const stub = echo.get(echo.idFromName("echo")) as unknown as Pick<LedgerApi, "append">;
        const signing = { secret: "NONE", gateway: url.origin };
        return Response.json(await drive((d) => stub.append([d], signing), intParam(url, "n", MAX_APPENDS), intParam(url, "c", MAX_IN_FLIGHT)));
      }
      const chain = url.searchParams.get("chain") ?? "";
      const ledger = ledgerObject(env, chain);
      if (!ledger) throw new Error("chain must be a chain name");
      const signing: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: url.origin };
      if (url.pathname === "/appends")
        return Response.json(
          await appends(
            env,
            chain,
            ledger,
            signing,
            intParam(url, "n", MAX_APPENDS),
            intParam(url, "c", MAX_IN_FLIGHT),
            url.searchParams.get("via") ?? "gateway",
          ),
        );
      if (url.pathname === "/status") return Response.json(counters(await ledger.status()));
      // One append per request, as a governed call makes it: the driver sends many at once, so the
      // Worker's group commit batches across requests (status().rpcs against appends shows it).
      if (url.pathname === "/append-one") {
        const d = decision();
        const [entry] = await batchedAppend(env, chain, signing, [d], LEDGER_WRITE_TIMEOUT_MS);
        if (!entry || entry.id !== d.id) throw new Error("the append was not confirmed");
        return Response.json({ seq: entry.seq });
      }
      if (url.pathname === "/pairs") return Response.json(await pairs(env, chain, signing, intParam(url, "n", MAX_APPENDS)));
      return Response.json({ error: "not found" }, { status: 404 });
    } catch (err) {
      return Response.json({ error: err instanceof Error ? err.message : String(err) }, { status: 500 });
    }
  },
};
