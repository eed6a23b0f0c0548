/**
 * A fake OIDC issuer on loopback (node:http) for the OAuth sign-in e2e suite: an auto-login
 * `/authorize` that checks and records the authorization request (response_type=code, its client
 * id, the expected redirect_uri, state, nonce, an S256 code_challenge) and redirects straight back
 * with a code and the state (or with error=access_denied when told to refuse); a `/token` that
 * checks the code, the PKCE verifier against the recorded challenge, the client id, the redirect
 * URI and (when configured) the client secret, and answers an RS256 id_token (jose) with iss, aud
 * = client id, sub, nonce (or a wrong one when told to), iat and exp; and `/jwks` with the public
 * key. Every check that fails is recorded in `problems` (the suite asserts there are none) and
 * answered 400. Owns only its own server; must never listen beyond 127.0.0.1 or sign anything
 * with a key it did not generate.
 */
import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { exportJWK, generateKeyPair, SignJWT } from "jose";

/** How the next sign-ins go: signed in, refused by the person, or answered with an id_token for another nonce. */
export type IdpMode = "ok" | "deny" | "wrong-nonce";

export interface FakeOidcOptions {
  clientId: string;
  /** The client secret the token endpoint insists on (client_secret_post); none when unset. */
  clientSecret?: string;
  /** The redirect URI the gateway must use (its /oauth/callback). */
  redirectUri: string;
  /** The `sub` of the person the IdP signs in. */
  sub: string;
}

export interface FakeOidc {
  /** The issuer (`iss` of its id_tokens): http://127.0.0.1:<port>. */
  issuer: string;
  authorizationEndpoint: string;
  tokenEndpoint: string;
  jwksUrl: string;
  mode: IdpMode;
  /** Every authorization request's query, in order. */
  authorizeQueries: URLSearchParams[];
  /** Every token request's form, in order. */
  tokenForms: URLSearchParams[];
  /** The id_tokens it issued, in order. */
  idTokens: string[];
  /** Every check that failed (empty when the gateway spoke the protocol as it should). */
  problems: string[];
  close(): Promise<void>;
}

const b64url = (b: Buffer) => b.toString("base64url");

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let s = "";
    req.setEncoding("utf8");
    req.on("data", (d: string) => {
      s += d;
      if (s.length > 64 * 1024) reject(new Error("too large"));
    });
    req.on("end", () => resolve(s));
    req.on("error", reject);
  });
}

export async function startFakeOidc(opts: FakeOidcOptions): Promise<FakeOidc> {
  const key = await generateKeyPair("RS256", { extractable: true });
  const jwks = { keys: [{ ...(await exportJWK(key.publicKey)), kid: "fake-idp-1", alg: "RS256", use: "sig" }] };
  const codes = new Map<string, { challenge: string; nonce: string; redirectUri: string; used: boolean }>();
  let server: Server;
  const idp: FakeOidc = {
    issuer: "",
    authorizationEndpoint: "",
    tokenEndpoint: "",
    jwksUrl: "",
    mode: "ok",
    authorizeQueries: [],
    tokenForms: [],
    idTokens: [],
    problems: [],
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
  const fail = (res: import("node:http").ServerResponse, why: string) => {
    idp.problems.push(why);
    res.writeHead(400, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: "invalid_request", error_description: why }));
  };

  server = createServer((req, res) => {
    const u = new URL(req.url ?? "/", idp.issuer);
    if (req.method === "GET" && u.pathname === "/jwks") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(jwks));
      return;
    }
    if (req.method === "GET" && u.pathname === "/authorize") {
      const q = u.searchParams;
      idp.authorizeQueries.push(q);
      if (q.get("response_type") !== "code") return fail(res, `authorize: response_type ${q.get("response_type")}`);
      if (q.get("client_id") !== opts.clientId) return fail(res, `authorize: client_id ${q.get("client_id")}`);
      if (q.get("redirect_uri") !== opts.redirectUri) return fail(res, `authorize: redirect_uri ${q.get("redirect_uri")}`);
      if (q.get("code_challenge_method") !== "S256") return fail(res, `authorize: code_challenge_method ${q.get("code_challenge_method")}`);
      const state = q.get("state");
      const nonce = q.get("nonce");
      const challenge = q.get("code_challenge");
      if (!state || !nonce || !challenge || !/^[A-Za-z0-9_-]{43}$/.test(challenge)) return fail(res, "authorize: no state, nonce or S256 code_challenge");
      if (!(q.get("scope") ?? "").split(" ").includes("openid")) return fail(res, `authorize: scope ${q.get("scope")} lacks openid`);
      const back = new URL(opts.redirectUri);
      if (idp.mode === "deny") {
        back.searchParams.set("error", "access_denied");
        back.searchParams.set("state", state);
      } else {
        const code = b64url(randomBytes(24));
        codes.set(code, { challenge, nonce, redirectUri: opts.redirectUri, used: false });
        back.searchParams.set("code", code);
        back.searchParams.set("state", state);
      }
      res.writeHead(302, { location: back.href });
      res.end();
      return;
    }
    if (req.method === "POST" && u.pathname === "/token") {
      void readBody(req).then(
        async (text) => {
          const f = new URLSearchParams(text);
          idp.tokenForms.push(f);
          if (f.get("grant_type") !== "authorization_code") return fail(res, `token: grant_type ${f.get("grant_type")}`);
          const c = codes.get(f.get("code") ?? "");
          if (!c || c.used) return fail(res, "token: unknown or reused code");
          c.used = true;
          if (f.get("client_id") !== opts.clientId) return fail(res, `token: client_id ${f.get("client_id")}`);
          if (opts.clientSecret !== undefined && f.get("client_secret") !== opts.clientSecret) return fail(res, "token: wrong or missing client_secret");
          if (f.get("redirect_uri") !== c.redirectUri) return fail(res, `token: redirect_uri ${f.get("redirect_uri")}`);
          const verifier = f.get("code_verifier") ?? "";
          if (b64url(createHash("sha256").update(verifier).digest()) !== c.challenge)
            return fail(res, "token: code_verifier does not match the code_challenge");
          const idToken = await new SignJWT({ nonce: idp.mode === "wrong-nonce" ? `${c.nonce}-not` : c.nonce, email: "pat@example.com" })
            .setProtectedHeader({ alg: "RS256", kid: "fake-idp-1", typ: "JWT" })
            .setIssuer(idp.issuer)
            .setAudience(opts.clientId)
            .setSubject(opts.sub)
            .setIssuedAt()
            .setExpirationTime("5m")
            .sign(key.privateKey);
          idp.idTokens.push(idToken);
          res.writeHead(200, { "content-type": "application/json", "cache-control": "no-store" });
          res.end(JSON.stringify({ access_token: b64url(randomBytes(16)), token_type: "Bearer", expires_in: 300, id_token: idToken }));
        },
        (e: Error) => fail(res, `token: ${e.message}`),
      );
      return;
    }
    res.writeHead(404, { "content-type": "text/plain" });
    res.end("not found");
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  idp.issuer = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  idp.authorizationEndpoint = `${idp.issuer}/authorize`;
  idp.tokenEndpoint = `${idp.issuer}/token`;
  idp.jwksUrl = `${idp.issuer}/jwks`;
  return idp;
}
