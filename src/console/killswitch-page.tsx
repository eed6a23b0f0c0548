/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The kill-switch page: its real state (version and every halt with scope, target, reason, who
 * and when) and, for an admin, the halt form and a resume form per halt. Must never: show a
 * state the service did not report (an unreadable switch is an error page, not "no halts"), or
 * offer the controls to a viewer without the admin role.
 */
import { HALT_SCOPES, type KillSwitchSnapshot } from "../../durable-objects/contract-killswitch.ts";
import { iso } from "./format.ts";
import { Layout, type Notice, NoticeBox, type Viewer } from "./layout.tsx";

/** One change from the ledger's `killswitch.changed` records (the `_global` chain), newest first. */
export interface KillSwitchChangeRow {
  at: string;
  action: string;
  scope: string;
  target: string | null;
  reason: string;
  by: string;
  version: number;
}

export function KillSwitchPage(props: {
  viewer: Viewer;
  snapshot: KillSwitchSnapshot;
  admin: boolean;
  notice?: Notice | null;
  /** The switch's history from the ledger; null when the store could not be read. */
  history?: KillSwitchChangeRow[] | null;
}) {
  const { snapshot, admin, viewer } = props;
  const history = props.history;
  return (
    <Layout title="Kill switch" viewer={viewer}>
      <h1>Kill switch</h1>
      <NoticeBox notice={props.notice} />
      <p id="ks-status">
        {snapshot.halts.length === 0
          ? `Running: nothing is halted (version ${snapshot.version}).`
          : `${snapshot.halts.length} halt${snapshot.halts.length === 1 ? "" : "s"} in force (version ${snapshot.version}).`}
      </p>
      {snapshot.halts.length ? (
        <table class="halts">
          <thead>
            <tr>
              <th>Scope</th>
              <th>Target</th>
              <th>Reason</th>
              <th>By</th>
              <th>At</th>
              {admin ? <th>Resume</th> : null}
            </tr>
          </thead>
          <tbody>
            {snapshot.halts.map((h) => (
              <tr>
                <td>{h.scope}</td>
                <td>{h.target ?? "(everything)"}</td>
                <td>{h.reason}</td>
                <td>{h.by}</td>
                <td>{iso(h.at)}</td>
                {admin ? (
                  <td>
                    <form method="post" action="/console/killswitch">
                      <input type="hidden" name="csrf" value={viewer.csrf} />
                      <input type="hidden" name="action" value="resume" />
                      <input type="hidden" name="scope" value={h.scope} />
                      <input type="hidden" name="target" value={h.target ?? ""} />
                      <input type="text" name="reason" required maxlength={500} placeholder="why resume" aria-label="reason to resume" />
                      <label class="confirm">
                        <input type="checkbox" name="confirm" value="yes" required />
                        {h.scope === "global" ? " resume every call" : ` resume ${h.scope} ${h.target ?? ""}`}
                      </label>
                      <button type="submit">Resume</button>
                    </form>
                  </td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {admin ? (
        <form class="box" method="post" action="/console/killswitch">
          <h2>Halt</h2>
          <input type="hidden" name="csrf" value={viewer.csrf} />
          <input type="hidden" name="action" value="halt" />
          <label for="scope">Scope</label>
          <select id="scope" name="scope">
            {HALT_SCOPES.map((s) => (
              <option value={s}>{s}</option>
            ))}
          </select>
          <label for="target">Target (team, upstream, exposed tool name, principal or grant jti; empty for global)</label>
          <input type="text" id="target" name="target" maxlength={200} />
          <label for="halt-reason">Reason</label>
          <input type="text" id="halt-reason" name="reason" required maxlength={500} />
          <label class="confirm" for="halt-confirm">
            <input type="checkbox" id="halt-confirm" name="confirm" value="yes" required />
            {" I understand: every new call in this scope is refused, and calls in flight are cancelled, until someone resumes it"}
          </label>
          <button type="submit" class="danger">
            Halt
          </button>
        </form>
      ) : (
        <p class="muted">Halting and resuming need the admin role.</p>
      )}
      <h2>History</h2>
      {history === null || history === undefined ? (
        <p class="muted">The history could not be read from the ledger just now.</p>
      ) : history.length === 0 ? (
        <p class="muted">No change recorded yet.</p>
      ) : (
        <table class="ks-history">
          <thead>
            <tr>
              <th>At</th>
              <th>Change</th>
              <th>Scope</th>
              <th>Target</th>
              <th>Reason</th>
              <th>By</th>
              <th>Version</th>
            </tr>
          </thead>
          <tbody>
            {history.map((c) => (
              <tr>
                <td>{c.at}</td>
                <td class={c.action === "halt" ? "bad" : "ok"}>{c.action}</td>
                <td>{c.scope}</td>
                <td>{c.target ?? "(everything)"}</td>
                <td>{c.reason}</td>
                <td>{c.by}</td>
                <td>{String(c.version)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Layout>
  );
}
