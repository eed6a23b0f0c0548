/**
 * Baseline for `npm run bench`: a bare pass-through Worker on the same runtime (workerd via
 * wrangler dev). It forwards every request to UPSTREAM_URL unchanged and streams the answer
 * back — the floor any gateway on Workers pays. Must never be deployed; bench only.
 */
interface Env {
  UPSTREAM_URL: string;
}

export default {
  async fetch(req: Request, env: Env): Promise<Response> {
    const headers = new Headers(req.headers);
    headers.delete("host");
    const res = await fetch(env.UPSTREAM_URL, { method: req.method, headers, body: req.body, redirect: "manual" });
    return new Response(res.body, { status: res.status, headers: res.headers });
  },
};
