/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The Connections pages: each OAuth upstream the viewer's grant reaches, whether it is connected
 * (by whom, when, which scopes at which authorization server, when the token expires) and the
 * connect or disconnect form; the page that sends the browser on to the authorization server
 * (a plain link naming its host, so the person sees where they sign in); and the page the browser
 * comes back to. Every value is JSX text or an attribute. Must never: render a token, a code, a
 * state or a verifier, or a form without the session's CSRF token.
 */
import type { ConnectionView } from "../services/connections-consent.ts";
import { Layout, type Notice, NoticeBox, type Viewer } from "./layout.tsx";

const when = (ms: number) =>
  new Date(ms)
    .toISOString()
    .replace("T", " ")
    .replace(/\.\d+Z$/, " UTC");

function Connection(props: { viewer: Viewer; c: ConnectionView; asked: boolean }) {
  const c = props.c;
  const k = c.connected;
  return (
    <section class="box" id={`upstream-${c.upstream}`} data-upstream={c.upstream} data-connected={k ? "yes" : "no"}>
      <h2>
        {c.upstream}
        {props.asked ? <span class="muted">{" · the call that sent you here needs it"}</span> : null}
      </h2>
      {c.description ? <p class="muted">{c.description}</p> : null}
      <p class="muted">
        {c.connection === "shared"
          ? `One connection for team ${props.viewer.team}, made by an operator.`
          : "Your own connection: calls with your grant use it."}
      </p>
      {k ? (
        <p class="status">
          {`Connected by ${k.by} on ${when(k.at)} · authorization server ${k.authorizationServer} · scopes ${k.scopes.join(" ") || "(none named)"}`}
          {k.expiresAt !== null ? ` · token refreshed before ${when(k.expiresAt)}` : ""}
          {k.usable ? "" : " · sealed under another credentials key: connect again"}
        </p>
      ) : (
        <p class="status">Not connected: calls to its tools are answered with a link to this page and reach nothing.</p>
      )}
      {c.canChange ? (
        <form method="post" action={`/console/connections/${encodeURIComponent(c.upstream)}/${k ? "disconnect" : "connect"}`}>
          <input type="hidden" name="csrf" value={props.viewer.csrf} />
          <button type="submit" class={k ? "danger" : ""}>
            {k ? `Disconnect ${c.upstream}` : `Connect ${c.upstream}`}
          </button>
        </form>
      ) : (
        <p class="muted">An operator or admin of your team connects or disconnects it.</p>
      )}
    </section>
  );
}

export function ConnectionsPage(props: { viewer: Viewer; connections: ConnectionView[]; asked: string | null; notice: Notice | null }) {
  return (
    <Layout title="Connections" viewer={props.viewer}>
      <h1>Connections</h1>
      <NoticeBox notice={props.notice} />
      <p>
        Upstreams that sign people in with OAuth. Connecting one signs you in at its authorization server; Portcullis keeps the tokens encrypted and sends them
        only to that upstream, for calls made with your grant (or your team's, for a shared connection).
      </p>
      {props.connections.length === 0 ? <p class="muted">No OAuth upstream is reachable with your grant.</p> : null}
      {props.connections.map((c) => (
        <Connection viewer={props.viewer} c={c} asked={props.asked === c.upstream} />
      ))}
    </Layout>
  );
}

/** Between the connect form and the authorization server: where the browser goes next, and a link to go. */
export function ContinuePage(props: { viewer: Viewer; upstream: string; location: string }) {
  const host = new URL(props.location).host;
  return (
    <Layout title="Connect" viewer={props.viewer}>
      <h1>{`Connect ${props.upstream}`}</h1>
      <p>{`You sign in at ${host}, the authorization server of ${props.upstream}, and approve access there; then it sends you back here.`}</p>
      <p>
        <a class="button" id="continue" href={props.location}>{`Continue to ${host}`}</a>
      </p>
      <p class="muted">The link works once, for ten minutes, in this browser only.</p>
    </Layout>
  );
}

/** Where the authorization server sends the browser back: connected, or why not. */
export function ReturnedPage(props: { viewer: Viewer | null; ok: boolean; upstream: string | null; text: string; status: number }) {
  return (
    <Layout title="Connections" viewer={props.viewer}>
      <h1>{props.ok ? `Connected ${props.upstream}` : "Not connected"}</h1>
      <div class={`notice ${props.ok ? "good" : "error"}`} role={props.ok ? "status" : "alert"}>
        {props.ok ? "" : <span class="muted">{`HTTP ${props.status} · `}</span>}
        {props.text}
      </div>
      <p>
        <a href="/console/connections">← Connections</a>
      </p>
    </Layout>
  );
}
