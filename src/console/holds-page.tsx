/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The approver's pages: pending (or any state's) holds as a table, and one hold in full — the
 * exact canonical action that is hashed (pretty-printed and, verbatim, the bytes), its action
 * hash, who asked and under which rule, and the approve / reject form that carries that hash
 * (disabled, with the reason, when this viewer cannot resolve it). Every agent- or
 * upstream-supplied string is JSX text. Must never: render a value as markup, offer a live form
 * for a hold the service says is not resolvable, or show "approved" for a hold the record does
 * not say is approved.
 */
import type { HoldRecord, HoldState } from "../../durable-objects/contract-holds.ts";
import type { HoldView } from "../services/approvals.ts";
import { age, classificationText, expiry, iso, prettyJson } from "./format.ts";
import { Layout, type Notice, NoticeBox, type Viewer } from "./layout.tsx";

export const HOLD_STATES: readonly HoldState[] = ["pending", "approved", "rejected", "expired", "consumed"];

export const holdPath = (id: string) => `/console/holds/${encodeURIComponent(id)}`;

function State(props: { state: HoldState }) {
  return <span class={`state state-${props.state}`}>{props.state}</span>;
}

const ruleText = (h: HoldRecord) => h.rule ?? "(mapping approval)";

/** How often the pending list reloads itself (no script: a meta refresh). */
export const PENDING_REFRESH_S = 5;

export function HoldsPage(props: { viewer: Viewer; holds: HoldView[]; state: HoldState | null; now: number; notice?: Notice | null }) {
  const { holds, now, state } = props;
  const label = state === null ? "All holds" : state === "pending" ? "Pending holds" : `Holds: ${state}`;
  return (
    <Layout title={label} viewer={props.viewer} refreshSeconds={state === "pending" ? PENDING_REFRESH_S : undefined}>
      <h1>{label}</h1>
      <NoticeBox notice={props.notice} />
      {state === "pending" ? (
        <p class="muted">{`This list refreshes itself every ${PENDING_REFRESH_S} s: a new hold appears, a resolved one leaves.`}</p>
      ) : null}
      <form class="filters" method="get" action="/console">
        <div>
          <label for="state">State</label>
          <select id="state" name="state">
            {[...HOLD_STATES, "all"].map((s) => (
              <option value={s} selected={(state ?? "all") === s}>
                {s}
              </option>
            ))}
          </select>
        </div>
        <button type="submit">Show</button>
      </form>
      {holds.length === 0 ? (
        <p class="muted">{state === "pending" ? "Nothing is waiting for approval." : "No holds."}</p>
      ) : (
        <table class="holds">
          <thead>
            <tr>
              <th>Tool</th>
              <th>Arguments</th>
              <th>Upstream</th>
              <th>Requester</th>
              <th>Rule</th>
              <th>Reason</th>
              <th>Classification</th>
              <th>Age</th>
              <th>Expiry</th>
              <th>State</th>
            </tr>
          </thead>
          <tbody>
            {holds.map(({ hold: h }) => (
              <tr>
                <td>
                  <a href={holdPath(h.id)}>{h.exposedName}</a>
                </td>
                <td>
                  <code class="args">{argumentsPreview(h.action)}</code>
                </td>
                <td>{h.upstream}</td>
                <td>{h.principal}</td>
                <td>{ruleText(h)}</td>
                <td>{h.reason}</td>
                <td>{classificationText(h.classification)}</td>
                <td>{age(h.createdAt, now)}</td>
                <td>{expiry(h.expiresAt, now)}</td>
                <td>
                  <State state={h.state} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Layout>
  );
}

/** How the consumed call ended, in words: a status only (the answer itself is the agent's, never shown here). */
function answerText(answered: HoldView["answered"]): string {
  if (answered === "succeeded") return "it succeeded";
  if (answered === "tool_error") return "the tool reported an error";
  if (answered === "error") return "it answered with a JSON-RPC error";
  return "it is running, or the gateway stopped before its answer was kept (the ledger's outcome record says which)";
}

/** The call's arguments in one short line (the list's preview; the hold's page has them whole). */
export function argumentsPreview(action: string, max = 80): string {
  let args: unknown;
  try {
    args = (JSON.parse(action) as { arguments?: unknown }).arguments;
  } catch {
    return "(unreadable)";
  }
  if (args === undefined || args === null) return "(none)";
  const text = JSON.stringify(args);
  if (text === "{}") return "(none)";
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** What became of the hold, in one sentence (from the record only). */
function outcome(h: HoldRecord, answered: HoldView["answered"]): string | null {
  const by = h.approver ?? "unknown";
  const why = h.resolveReason ? `: ${h.resolveReason}` : "";
  if (h.state === "approved") return `approved by ${by} at ${iso(h.resolvedAt)}${why}`;
  if (h.state === "rejected") return `rejected by ${by} at ${iso(h.resolvedAt)}${why}`;
  if (h.state === "consumed") return `approved by ${by} at ${iso(h.resolvedAt)}${why}; the call ran once at ${iso(h.consumedAt)}: ${answerText(answered)}`;
  if (h.state === "expired") return `expired at ${iso(h.expiresAt)} without a decision`;
  return null;
}

/**
 * One hold. `reason`: the text the approver had typed, when a decision was refused and the page is
 * shown again (kept in the form, with the notice saying why).
 */
export function HoldPage(props: { viewer: Viewer; view: HoldView; now: number; notice?: Notice | null; reason?: string; proposed?: "approve" | "reject" }) {
  const { view, now } = props;
  const h = view.hold;
  const done = outcome(h, view.answered);
  const off = !view.resolvable;
  return (
    <Layout title={`Hold ${h.id}`} viewer={props.viewer}>
      <p>
        <a href="/console">← Pending holds</a>
      </p>
      <h1>
        {`Hold for ${h.exposedName} · `}
        <State state={h.state} />
      </h1>
      <NoticeBox notice={props.notice} />
      {done ? (
        <div class={`notice ${h.state === "rejected" || h.state === "expired" ? "error" : "good"}`} role="status" id="outcome">
          {done}
        </div>
      ) : null}
      {h.notForwarded ? <div class="notice error">{`The approved call was not forwarded (${h.notForwarded}); it may be approved again.`}</div> : null}
      <table class="facts">
        <tbody>
          <tr>
            <th>Hold id</th>
            <td>
              <code>{h.id}</code>
            </td>
          </tr>
          <tr>
            <th>Tool (as called)</th>
            <td>{h.exposedName}</td>
          </tr>
          <tr>
            <th>Upstream / its tool</th>
            <td>{`${h.upstream} / ${h.tool}`}</td>
          </tr>
          <tr>
            <th>Requester</th>
            <td>{`${h.principal} (team ${h.team})`}</td>
          </tr>
          <tr>
            <th>Rule</th>
            <td>{ruleText(h)}</td>
          </tr>
          <tr>
            <th>Reason</th>
            <td>{h.reason}</td>
          </tr>
          <tr>
            <th>Classification</th>
            <td>{classificationText(h.classification)}</td>
          </tr>
          <tr>
            <th>Created</th>
            <td>{`${iso(h.createdAt)} (${age(h.createdAt, now)})`}</td>
          </tr>
          <tr>
            <th>Expires</th>
            <td>{`${iso(h.expiresAt)} (${expiry(h.expiresAt, now)})`}</td>
          </tr>
        </tbody>
      </table>
      <h2>The exact action (this is what is hashed and what will run)</h2>
      <pre id="action">{prettyJson(h.action)}</pre>
      <details>
        <summary>Canonical bytes (RFC 8785 JSON of principal, upstream, tool and arguments)</summary>
        <pre id="action-raw">{h.action}</pre>
      </details>
      <p>
        {"Action hash (SHA-256): "}
        <code id="action-hash">{h.actionHash}</code>
      </p>
      {h.state === "pending" ? (
        <>
          <h2>Decision</h2>
          <form class="resolve" method="post" action={`${holdPath(h.id)}/resolve`}>
            <input type="hidden" name="csrf" value={props.viewer.csrf} />
            <input type="hidden" name="action_hash" value={h.actionHash} />
            {off ? (
              <div class="notice" id="not-resolvable">
                {`You cannot approve or reject this hold: ${view.why ?? "not allowed"}`}
              </div>
            ) : null}
            <label for="reason">Reason (recorded on the ledger with your decision; a rejection needs one: the agent is told it)</label>
            <textarea id="reason" name="reason" maxlength={500} disabled={off}>
              {props.reason ?? ""}
            </textarea>
            <button type="submit" name="decision" value="approve" disabled={off} class={props.proposed === "approve" ? "proposed" : undefined}>
              Approve this exact call
            </button>
            <button type="submit" name="decision" value="reject" disabled={off} class={props.proposed === "reject" ? "proposed danger" : undefined}>
              Reject
            </button>
          </form>
        </>
      ) : null}
    </Layout>
  );
}
