/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The frame of every console page: the document head (the one inline stylesheet the CSP allows
 * by hash), the navigation the viewer's roles reach, who is signed in and how, the sign-out form,
 * and the generic notice and error blocks. Every value goes through JSX text or attributes, which
 * escape it. Must never: emit a script, an inline event handler, raw HTML from a value, or the
 * viewer's token.
 */
import type { Child } from "hono/jsx";
import { CONSOLE_CSS } from "./headers.ts";

/** Who is looking at a page, and the CSRF token its forms carry. */
export interface Viewer {
  sub: string;
  team: string;
  roles: string[];
  via: "grant" | "access";
  csrf: string;
  /** Signed in without a console role: only Connections is open to it. */
  connectionsOnly?: boolean;
}

export type NoticeKind = "info" | "good" | "error";
export interface Notice {
  kind: NoticeKind;
  text: string;
}

const can = (v: Viewer, ...roles: string[]) => v.roles.includes("admin") || roles.some((r) => v.roles.includes(r));

export function Nav(props: { viewer: Viewer }) {
  const v = props.viewer;
  if (v.connectionsOnly)
    return (
      <nav>
        <a href="/console/connections">Connections</a>
      </nav>
    );
  return (
    <nav>
      <a href="/console/overview">Overview</a>
      <a href="/console">Holds</a>
      {can(v, "auditor") ? <a href="/console/ledger">Ledger</a> : null}
      <a href="/console/runs">Runs</a>
      <a href="/console/killswitch">Kill switch</a>
      <a href="/console/tools">Tools</a>
      <a href="/console/connections">Connections</a>
    </nav>
  );
}

export function NoticeBox(props: { notice: Notice | null | undefined }) {
  const n = props.notice;
  if (!n) return null;
  return (
    <div class={`notice ${n.kind === "info" ? "" : n.kind}`} role={n.kind === "error" ? "alert" : "status"}>
      {n.text}
    </div>
  );
}

/** `refreshSeconds`: the page reloads itself that often (a list that must show what changed, with no script). */
export function Layout(props: { title: string; viewer: Viewer | null; refreshSeconds?: number; children?: Child }) {
  const v = props.viewer;
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="robots" content="noindex" />
        {props.refreshSeconds ? <meta http-equiv="refresh" content={String(props.refreshSeconds)} /> : null}
        <title>{`${props.title} · Portcullis`}</title>
        <style dangerouslySetInnerHTML={{ __html: CONSOLE_CSS }} />
      </head>
      <body>
        <header>
          <span class="brand">Portcullis</span>
          {v ? <Nav viewer={v} /> : null}
          {v ? (
            <span class="who">
              {`${v.sub} · team ${v.team} · ${v.roles.join(", ")} · ${v.via === "access" ? "Cloudflare Access" : "grant"}`}
              {v.via === "grant" ? (
                <form method="post" action="/console/logout">
                  <input type="hidden" name="csrf" value={v.csrf} />
                  <button type="submit">Sign out</button>
                </form>
              ) : null}
            </span>
          ) : null}
        </header>
        <main>{props.children}</main>
      </body>
    </html>
  );
}

/** A page that says what went wrong, with the status the response carries. */
export function ErrorPage(props: { viewer: Viewer | null; status: number; title: string; message: string; back?: { href: string; label: string } }) {
  return (
    <Layout title={props.title} viewer={props.viewer}>
      <h1>{props.title}</h1>
      <div class="notice error" role="alert">
        <span class="muted">{`HTTP ${props.status} · `}</span>
        {props.message}
      </div>
      {props.back ? (
        <p>
          <a href={props.back.href}>{props.back.label}</a>
        </p>
      ) : null}
    </Layout>
  );
}

/** The sign-in page: paste a grant (it goes into an HttpOnly cookie, never into a page or URL). */
export function LoginPage(props: { problem?: string | null; access: boolean; next?: string | null }) {
  return (
    <Layout title="Sign in" viewer={null}>
      <h1>Sign in to the Portcullis console</h1>
      {props.problem ? (
        <div class="notice error" role="alert">
          {props.problem}
        </div>
      ) : null}
      <form class="box" method="post" action="/console/login">
        {props.next ? <input type="hidden" name="next" value={props.next} /> : null}
        <label for="token">Grant token (approver, auditor, operator or admin; an agent's grant to connect its OAuth upstreams)</label>
        <textarea id="token" name="token" required autocomplete="off" spellcheck={false} placeholder="eyJhbGciOi…" />
        <p class="muted">
          The token is kept in an HttpOnly, Secure, SameSite=Strict cookie for as long as the grant lives, and checked again on every page (revoking the grant
          signs you out).
        </p>
        <button type="submit">Sign in</button>
      </form>
      {props.access ? <p class="muted">Behind Cloudflare Access, you are signed in by Access itself; this form is only needed without it.</p> : null}
    </Layout>
  );
}
