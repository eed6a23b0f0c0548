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

export function KillSwitchPage(props: { viewer: Viewer; snapshot: KillSwitchSnapshot; admin: boolean; notice?: Notice | null }) {
  const { snapshot, admin, viewer } = props;
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
          <button type="submit">Halt</button>
        </form>
      ) : (
        <p class="muted">Halting and resuming need the admin role.</p>
      )}
    </Layout>
  );
}
