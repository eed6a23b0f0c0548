/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The two pages a person sees when a hosted MCP client (Claude, ChatGPT, VS Code) connects through
 * OAuth: the sign-in page (the sources auth.oauth.sign_in configures: an enrollment code, an
 * OIDC issuer, Cloudflare Access) and the consent page (the client's name, its verified domain or
 * that it registered itself, where the grant goes — the redirect host, with a warning for an app
 * on this computer — and exactly what the grant will carry: tools, roles, team, lifetime). Every
 * value goes through JSX text or attributes, which escape it. Must never: emit a script or raw
 * HTML from a value, show a token or code, or put the original request anywhere but a hidden field
 * the server parses and validates again.
 */
import { Layout } from "./layout.tsx";

/** What the pages show about the client (from its registration or metadata document: attacker-chosen, escaped). */
export interface ClientFacts {
  name: string;
  /** A metadata-document client's domain (its client_id's host); absent for a self-registered one. */
  domain?: string;
  redirectHost: string;
  redirectIsLoopback: boolean;
}

/** The grant the consent page offers. */
export interface OfferFacts {
  sub: string;
  via: string;
  team: string;
  roles: string[];
  tools: string[];
  budget?: number;
  lifetime: string;
  /** Tools of an enrollment code its template does not cover (left out). */
  dropped?: string[];
}

function ClientBlock(props: { client: ClientFacts }) {
  const c = props.client;
  return (
    <div class="box">
      <p>
        <strong>{c.name}</strong>{" "}
        {c.domain ? <span>{`· published by ${c.domain}`}</span> : <span class="muted">· this app registered itself; its name is not verified</span>}
      </p>
      <p>
        {"The grant will be sent to "}
        <strong>{c.redirectHost}</strong>.
      </p>
      {c.redirectIsLoopback ? (
        <p class="notice error" role="alert">
          This sends access to an app on your computer. Continue only if you just started connecting from it.
        </p>
      ) : null}
    </div>
  );
}

/** How the person may sign in; each form posts back to the authorization endpoint with the original request. */
export function OAuthSignInPage(props: {
  client: ClientFacts;
  query: string;
  enrollment: boolean;
  oidc: { issuer: string; label: string }[];
  access: boolean;
  problem?: string | null;
}) {
  return (
    <Layout title="Sign in to connect" viewer={null}>
      <h1>Sign in to connect an MCP client</h1>
      <ClientBlock client={props.client} />
      {props.problem ? (
        <div class="notice error" role="alert">
          {props.problem}
        </div>
      ) : null}
      {props.enrollment ? (
        <form class="box" method="post" action="/oauth/authorize">
          <input type="hidden" name="action" value="enroll" />
          <input type="hidden" name="q" value={props.query} />
          <label for="code">Enrollment code</label>
          <input id="code" name="code" required autocomplete="off" spellcheck={false} placeholder="pce_…" />
          <p class="muted">The code your administrator gave you (portcullis token enroll). It works once.</p>
          <button type="submit">Continue</button>
        </form>
      ) : null}
      {props.oidc.map((o) => (
        <form class="box" method="post" action="/oauth/authorize">
          <input type="hidden" name="action" value="oidc" />
          <input type="hidden" name="q" value={props.query} />
          <input type="hidden" name="issuer" value={o.issuer} />
          <button type="submit">{`Sign in with ${o.label}`}</button>
        </form>
      ))}
      {props.access ? <p class="muted">Behind Cloudflare Access, open this page through your Access application to be signed in by Access.</p> : null}
    </Layout>
  );
}

/** What the client will hold if the person allows it; Allow and Deny post the consent handle and the signed offer. */
export function OAuthConsentPage(props: { client: ClientFacts; offer: OfferFacts; handle: string; signed: string }) {
  const o = props.offer;
  return (
    <Layout title="Allow access" viewer={null}>
      <h1>{`Allow ${props.client.name} to use Portcullis as ${o.sub}?`}</h1>
      <ClientBlock client={props.client} />
      <div class="box">
        <p>{`Signed in as ${o.sub} (${o.via}).`}</p>
        <p>The client receives a grant that carries:</p>
        <dl>
          <dt>Tools</dt>
          <dd>{o.tools.length ? o.tools.join(", ") : "none (it can list and call no tool)"}</dd>
          <dt>Roles</dt>
          <dd>{o.roles.join(", ")}</dd>
          <dt>Team</dt>
          <dd>{o.team}</dd>
          {o.budget !== undefined ? (
            <>
              <dt>Budget</dt>
              <dd>{`${o.budget} calls`}</dd>
            </>
          ) : null}
          <dt>Lifetime</dt>
          <dd>{`${o.lifetime}, refreshes included; revoking the grant ends it at once`}</dd>
        </dl>
        {o.dropped?.length ? <p class="muted">{`Left out (not allowed for this sign-in): ${o.dropped.join(", ")}`}</p> : null}
      </div>
      <form class="box" method="post" action="/oauth/authorize">
        <input type="hidden" name="action" value="consent" />
        <input type="hidden" name="handle" value={props.handle} />
        <input type="hidden" name="offer" value={props.signed} />
        <button type="submit" name="decision" value="approve">
          Allow
        </button>{" "}
        <button type="submit" name="decision" value="deny">
          Deny
        </button>
      </form>
    </Layout>
  );
}
