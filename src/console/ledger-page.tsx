/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The auditor's pages: recent ledger entries of the chains the viewer may read (filter by kind
 * and tool, newest first, a link to the next page), and the trace of one call — its decision,
 * enforcement, outcome and hold records with what became of it. Bodies are shown as indented
 * JSON text. Must never: render a record field as markup, or link anywhere but the console.
 */
import { ENTRY_KINDS, type LedgerEntry } from "../ledger/records.ts";
import { field, pretty } from "./format.ts";
import { Layout, type Viewer } from "./layout.tsx";

export const tracePath = (id: string) => `/console/ledger/${encodeURIComponent(id)}`;

/** The call a record belongs to: its decision id, or its own id. */
function callId(e: LedgerEntry): string {
  const d = e.body.decision_id;
  return typeof d === "string" && d !== "" ? d : e.id;
}

/** `index`: what the store indexed for each entry, in the same order (an outcome's tool and principal are its decision's). */
export function LedgerPage(props: {
  viewer: Viewer;
  entries: LedgerEntry[];
  index?: { principal: string | null; tool: string | null }[];
  kind: string | null;
  tool: string | null;
  next: string | null;
}) {
  const { entries, kind, tool, next } = props;
  const more = new URLSearchParams();
  if (kind) more.set("kind", kind);
  if (tool) more.set("tool", tool);
  if (next) more.set("after", next);
  return (
    <Layout title="Ledger" viewer={props.viewer}>
      <h1>Ledger</h1>
      <form class="filters" method="get" action="/console/ledger">
        <div>
          <label for="kind">Kind</label>
          <select id="kind" name="kind">
            <option value="" selected={!kind}>
              any
            </option>
            {ENTRY_KINDS.map((k) => (
              <option value={k} selected={kind === k}>
                {k}
              </option>
            ))}
          </select>
        </div>
        <div>
          <label for="tool">Tool</label>
          <input type="text" id="tool" name="tool" value={tool ?? ""} placeholder="exposed tool name" />
        </div>
        <button type="submit">Filter</button>
      </form>
      {entries.length === 0 ? (
        <p class="muted">No entries.</p>
      ) : (
        <table class="ledger">
          <thead>
            <tr>
              <th>At</th>
              <th>Kind</th>
              <th>Tool</th>
              <th>Principal</th>
              <th>Status / decision</th>
              <th>Chain · seq</th>
              <th>Call</th>
            </tr>
          </thead>
          <tbody>
            {entries.map((e, i) => (
              <tr>
                <td>{e.at}</td>
                <td>{e.kind}</td>
                <td>{props.index?.[i]?.tool ?? field(e.body, "tool")}</td>
                <td>{props.index?.[i]?.principal ?? field(e.body, "principal", field(e.body, "by"))}</td>
                <td>{field(e.body, "status", field(e.body, "decision"))}</td>
                <td>{`${e.chain} · ${e.seq}`}</td>
                <td>
                  <a href={tracePath(callId(e))}>trace</a>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {next ? (
        <p>
          <a href={`/console/ledger?${more.toString()}`}>Older entries →</a>
        </p>
      ) : null}
    </Layout>
  );
}

export function TracePage(props: { viewer: Viewer; chain: string; id: string; status: string; records: LedgerEntry[] }) {
  return (
    <Layout title={`Trace ${props.id}`} viewer={props.viewer}>
      <p>
        <a href="/console/ledger">← Ledger</a>
      </p>
      <h1>{`Call ${props.id}`}</h1>
      <p>
        {"Status: "}
        <span class="state">{props.status}</span>
        {` · chain ${props.chain} · ${props.records.length} record${props.records.length === 1 ? "" : "s"}`}
      </p>
      {props.records.map((r) => (
        <section>
          <h2>{`${r.seq} · ${r.kind} · ${r.at}`}</h2>
          <pre>{pretty(r.body)}</pre>
          <p class="muted">
            {"hash "}
            <code>{r.hash}</code>
          </p>
        </section>
      ))}
    </Layout>
  );
}
