/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The operator's run pages ([R]): the runs the viewer may see (run, principal, steps, last
 * activity), and one run in full — its steps newest first (tool, when, outcome, the compensation
 * its outcome record keeps, how far its rollback got and the read-back's verdict, all from the
 * ledger), the rollback plan (what would be undone in which order, which compensations need
 * approval, which steps cannot be undone and why), a dry run's result, the Dry run form, and —
 * for the operator role (or admin) only — the Roll back form with its confirm and "also approve"
 * boxes. Every agent- or upstream-supplied string (tool names, arguments, reasons) is JSX text.
 * Must never: render a value as markup, show a step's state the run view did not report, or offer
 * the Roll back form to a viewer without the operator role.
 */
import type { CompensationRecord } from "../governance/compensation.ts";
import type { PlannedCompensation, RunStep } from "../governance/rollback.ts";
import type { RunDetail, RunSummary } from "../services/run-records.ts";
import type { RollbackReport } from "../services/run-rollback.ts";
import { Layout, type Notice, NoticeBox, type Viewer } from "./layout.tsx";

/** Which run of which principal (and, for an admin, which team's chain) a page is about. */
export interface RunScope {
  principal?: string;
  team?: string;
}

/** `/console/runs/<run>` with the scope (and any `extra` parameters) as its query. */
export function runPath(run: string, scope: RunScope = {}, extra: Record<string, string> = {}): string {
  const q = new URLSearchParams();
  if (scope.principal) q.set("principal", scope.principal);
  if (scope.team) q.set("team", scope.team);
  for (const [k, v] of Object.entries(extra)) q.set(k, v);
  const s = q.toString();
  return `/console/runs/${encodeURIComponent(run)}${s ? `?${s}` : ""}`;
}

const json = (v: unknown) => JSON.stringify(v) ?? String(v);

export function RunsPage(props: { viewer: Viewer; runs: RunSummary[]; team: string; admin: boolean; notice?: Notice | null }) {
  const { runs, team, admin, viewer } = props;
  const scopeTeam = team !== viewer.team ? team : undefined;
  return (
    <Layout title="Runs" viewer={viewer}>
      <h1>{`Runs · team ${team}`}</h1>
      <NoticeBox notice={props.notice} />
      {admin ? (
        <form class="filters" method="get" action="/console/runs">
          <div>
            <label for="team">Team</label>
            <input type="text" id="team" name="team" value={team} maxlength={200} />
          </div>
          <button type="submit">Show</button>
        </form>
      ) : null}
      {runs.length === 0 ? (
        <p class="muted">No runs.</p>
      ) : (
        <table class="runs">
          <thead>
            <tr>
              <th>Run</th>
              <th>Who</th>
              <th>Steps</th>
              <th>Touched</th>
              <th>Started</th>
              <th>Last activity</th>
            </tr>
          </thead>
          <tbody>
            {runs.map((r) => (
              <tr>
                <td>
                  <a href={runPath(r.run, { principal: r.principal, ...(scopeTeam ? { team: scopeTeam } : {}) })}>
                    <code>{r.run}</code>
                  </a>
                </td>
                <td>{r.principal}</td>
                <td>{String(r.steps)}</td>
                <td class="touched">{`${(r.touched ?? []).join(", ")}${r.touched_more ? ` and ${r.touched_more} more` : ""}`}</td>
                <td>{r.started_at}</td>
                <td>{r.last_at}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Layout>
  );
}

/** The compensation an outcome record keeps, in words. */
export function compensationText(c: CompensationRecord | null): string {
  if (!c) return "none declared";
  if (c.status === "planned") return `planned: ${c.tool} ${json(c.arguments)}${c.approval === "required" ? " (needs approval)" : ""}`;
  if (c.status === "unavailable") return `cannot be undone automatically: ${c.reason}`;
  return `nothing to undo: ${c.reason}`;
}

/** How far a step's rollback got beyond its state word (attempts, why, who and when), from its `rollback.step` records. */
function rollbackDetail(s: RunStep): string {
  const r = s.rollback;
  if (!r) return "";
  const tries = r.attempts > 0 ? ` (${r.attempts} attempt${r.attempts === 1 ? "" : "s"})` : "";
  return `${tries}${r.reason ? `: ${r.reason}` : ""}${r.by ? ` · by ${r.by} at ${r.at}` : ""}`;
}

const STATE_CLASS: Record<string, string> = {
  compensated: "ok",
  verified: "ok",
  succeeded: "ok",
  failed: "bad",
  verification_failed: "bad",
  uncertain: "warn",
  pending: "warn",
  started: "warn",
  skipped: "warn",
  unverified: "warn",
  would_run: "ok",
  not_run: "warn",
};

function Word(props: { text: string }) {
  return <span class={`state ${STATE_CLASS[props.text] ?? ""}`}>{props.text}</span>;
}

function readBack(c: PlannedCompensation): string {
  return c.verification ? `${c.verification.tool} ${json(c.verification.arguments)} expect ${json(c.verification.expect)}` : "none declared";
}

function Hidden(props: { viewer: Viewer; scope: RunScope }) {
  return (
    <>
      <input type="hidden" name="csrf" value={props.viewer.csrf} />
      {props.scope.principal ? <input type="hidden" name="principal" value={props.scope.principal} /> : null}
      {props.scope.team ? <input type="hidden" name="team" value={props.scope.team} /> : null}
    </>
  );
}

export function RunPage(props: {
  viewer: Viewer;
  detail: RunDetail;
  /** The scope the page's forms post back (the run's principal, and a team an admin named). */
  scope: RunScope;
  /** Whether the viewer may execute a rollback (operator or admin). */
  operator: boolean;
  notice?: Notice | null;
  dryRun?: RollbackReport | null;
}) {
  const { viewer, detail, scope, operator } = props;
  const view = detail.run;
  const plan = detail.plan;
  const steps = [...view.steps].sort((a, b) => b.seq - a.seq);
  const base = `/console/runs/${encodeURIComponent(view.run)}`;
  const dry = props.dryRun ?? null;
  return (
    <Layout title={`Run ${view.run}`} viewer={viewer}>
      <p>
        <a href={`/console/runs${scope.team ? `?${new URLSearchParams({ team: scope.team }).toString()}` : ""}`}>← Runs</a>
      </p>
      <h1>
        {"Run "}
        <code>{view.run}</code>
      </h1>
      <NoticeBox notice={props.notice} />
      <table class="facts">
        <tbody>
          <tr>
            <th>Principal</th>
            <td id="run-principal">{`${view.principal} (team ${view.team})`}</td>
          </tr>
          <tr>
            <th>Started</th>
            <td>{view.started_at}</td>
          </tr>
          <tr>
            <th>Last activity</th>
            <td>{view.last_at}</td>
          </tr>
          <tr>
            <th>Steps</th>
            <td>{String(view.steps.length)}</td>
          </tr>
        </tbody>
      </table>

      <h2>Steps (newest first)</h2>
      <table class="steps">
        <thead>
          <tr>
            <th>Tool</th>
            <th>When</th>
            <th>Outcome</th>
            <th>Compensation</th>
            <th>Rollback</th>
            <th>Verification</th>
          </tr>
        </thead>
        <tbody>
          {steps.map((s) => (
            <tr data-decision={s.decision_id}>
              <td class="tool">{`${s.upstream} / ${s.tool}`}</td>
              <td>{s.at}</td>
              <td class="outcome">
                <Word text={s.status} />
              </td>
              <td class="compensation">{compensationText(s.compensation)}</td>
              <td class="rollback">
                {s.rollback ? <Word text={s.rollback.state} /> : "—"}
                {rollbackDetail(s)}
              </td>
              <td class="verification">{s.rollback?.verification ? <Word text={s.rollback.verification} /> : "—"}</td>
            </tr>
          ))}
        </tbody>
      </table>

      <h2>Rollback plan</h2>
      {plan.compensations.length === 0 ? (
        <p id="plan-empty" class="muted">
          Nothing is left to undo automatically.
        </p>
      ) : (
        <>
          <p>{`${plan.compensations.length} compensation${plan.compensations.length === 1 ? "" : "s"}, called in this order (newest step first), each with its step's idempotency key:`}</p>
          <table class="plan">
            <thead>
              <tr>
                <th>#</th>
                <th>Undoes</th>
                <th>Compensation</th>
                <th>Read-back</th>
                <th>Approval</th>
              </tr>
            </thead>
            <tbody>
              {plan.compensations.map((c, i) => (
                <tr data-decision={c.decision_id}>
                  <td>{String(i + 1)}</td>
                  <td class="undoes">{`${c.upstream} / ${c.step_tool}`}</td>
                  <td class="compensation">{`${c.tool} ${json(c.arguments)}${c.retried ? " (a previous rollback started it; the key keeps it from applying twice)" : ""}`}</td>
                  <td class="readback">{readBack(c)}</td>
                  <td class="approval">{c.needs_approval ? <span class="state warn">needs approval</span> : "not needed"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      {plan.not_reversible.length ? (
        <>
          <h2>Cannot be undone automatically</h2>
          <table class="not-reversible" id="not-reversible">
            <thead>
              <tr>
                <th>Step</th>
                <th>Why</th>
              </tr>
            </thead>
            <tbody>
              {plan.not_reversible.map((n) => (
                <tr data-decision={n.decision_id}>
                  <td>{`${n.upstream} / ${n.tool}`}</td>
                  <td>{n.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
      <p class="muted" id="plan-counts">
        {`Already undone: ${plan.already_compensated.length} · nothing to undo (read-only or failed): ${plan.nothing_to_undo.length} · cannot be undone: ${plan.not_reversible.length}`}
      </p>

      {dry ? (
        <section id="dry-run">
          <h2>Dry run (nothing was called)</h2>
          {dry.steps.length === 0 ? (
            <p class="muted">The rollback would call nothing.</p>
          ) : (
            <table class="dry-run">
              <thead>
                <tr>
                  <th>#</th>
                  <th>Compensation</th>
                  <th>Would</th>
                  <th>Why</th>
                </tr>
              </thead>
              <tbody>
                {dry.steps.map((s, i) => (
                  <tr data-decision={s.decision_id}>
                    <td>{String(i + 1)}</td>
                    <td>{`${s.upstream} / ${s.tool}`}</td>
                    <td class="state-cell">
                      <Word text={s.state} />
                    </td>
                    <td>{s.reason ?? ""}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </section>
      ) : null}

      <form class="box dry-run" method="post" action={`${base}/dry-run`}>
        <Hidden viewer={viewer} scope={scope} />
        <p class="muted">A dry run shows what the rollback would call; it calls nothing on any upstream.</p>
        <button type="submit" id="dry-run-button">
          Dry run
        </button>
      </form>
      {operator ? (
        <form class="box rollback" method="post" action={`${base}/rollback`}>
          <h2>Roll back</h2>
          <Hidden viewer={viewer} scope={scope} />
          <label>
            <input type="checkbox" id="confirm" name="confirm" value="yes" required disabled={plan.compensations.length === 0} />
            {" I confirm: call each compensation above on its upstream, newest first (recorded on the ledger)"}
          </label>
          <label>
            <input type="checkbox" id="approve-compensations" name="approve_compensations" value="yes" disabled={plan.compensations.length === 0} />
            {" Also approve the compensations that need approval"}
          </label>
          <button type="submit" id="rollback-button" disabled={plan.compensations.length === 0}>
            Roll back
          </button>
        </form>
      ) : (
        <p class="muted" id="no-rollback">
          Rolling a run back needs the operator role; you can see the plan and make a dry run.
        </p>
      )}
    </Layout>
  );
}
