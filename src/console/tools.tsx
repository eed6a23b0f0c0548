/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The tool-classification page: every tool the viewer's grant reaches with its banner level (OK
 * mapped, NOTE heuristic read, WARN heuristic write, BLOCK unclassified or drifted) and why, what
 * the policy makes of it (the decision a call gets with no other facts, the rule or the baseline,
 * whether agents see it at all, and the rules that apply only sometimes), the totals, and the
 * upstreams whose tools could not be listed, each with why (unreachable, timed out, an HTTP
 * status, an invalid answer, …). Tool names, upstream names and reasons are JSX text.
 * Must never: list a tool the viewer's grant does not reach, or render a tool's name as markup.
 */
import type { BannerLevel, BannerLine } from "../governance/classify.ts";
import type { ToolPolicy } from "../governance/policy-view.ts";
import { Layout, type Viewer } from "./layout.tsx";

export interface ToolRow extends BannerLine {
  exposedName: string;
  /** What the policy makes of the tool; null when it could not be computed. */
  policy: ToolPolicy | null;
}

/** `deny (rule no-env) · hidden from agents` / `allow (the baseline)`. */
function policyText(p: ToolPolicy): string {
  return `${p.decision}${p.rule ? ` (rule ${p.rule})` : " (the baseline: no rule decides it)"}${p.hidden ? " · hidden from agents" : ""}`;
}

const LEVEL_CLASS: Record<BannerLevel, string> = { OK: "ok", NOTE: "muted", WARN: "warn", BLOCK: "bad" };

/** An upstream whose tools could not be listed, and why (it gave no answer: the reason and detail; or its list did not end). */
export interface UnlistedUpstream {
  upstream: string;
  why: string;
}

export function ToolsPage(props: { viewer: Viewer; mode: string; rows: ToolRow[]; totals: Record<BannerLevel, number>; unlisted: UnlistedUpstream[] }) {
  const t = props.totals;
  return (
    <Layout title="Tools" viewer={props.viewer}>
      <h1>Tool classification</h1>
      <p>{`Mode ${props.mode} · ${props.rows.length} tool${props.rows.length === 1 ? "" : "s"} shown (your grant's; an approver's also those whose holds it may decide; an auditor's or operator's every one): ${t.OK} OK, ${t.NOTE} NOTE, ${t.WARN} WARN, ${t.BLOCK} BLOCK`}</p>
      {props.unlisted.length ? (
        <div class="notice error">
          {`Could not list the tools of ${props.unlisted.length} upstream${props.unlisted.length === 1 ? "" : "s"}; their tools are missing below:`}
          <ul class="unlisted">
            {props.unlisted.map((u) => (
              <li>
                <strong>{u.upstream}</strong>
                {` — ${u.why}`}
              </li>
            ))}
          </ul>
        </div>
      ) : null}
      {props.rows.length === 0 ? (
        <p class="muted">{props.unlisted.length ? "No tools could be listed for your grant." : "Your grant reaches no tools."}</p>
      ) : (
        <table class="tools">
          <thead>
            <tr>
              <th>Level</th>
              <th>Tool</th>
              <th>Upstream / its tool</th>
              <th>Why</th>
              <th>Policy</th>
            </tr>
          </thead>
          <tbody>
            {props.rows.map((r) => (
              <tr>
                <td class={LEVEL_CLASS[r.level]}>{r.level}</td>
                <td>{r.exposedName}</td>
                <td>{`${r.upstream} / ${r.tool}`}</td>
                <td>{r.why}</td>
                <td>
                  {r.policy ? policyText(r.policy) : "—"}
                  {r.policy?.sometimes.map((s) => (
                    <div class="muted">{s}</div>
                  ))}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Layout>
  );
}
