import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
const client = new Client({ name: 'smoke', version: '1.0.0' }, { versionNegotiation: { mode: 'legacy' }, capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } });
client.setRequestHandler("sampling/createMessage", async (req) => ({ model: "m", role: "assistant", content: { type: "text", text: "sampled" } }));
client.setRequestHandler("elicitation/create", async () => ({ action: "accept", content: { username: "ada", email: "a@b.c", extra: 1 } }));
client.setRequestHandler("roots/list", async () => ({ roots: [{ uri: "file:///work/e2e", name: "r" }] }));
const t = new StreamableHTTPClientTransport(new URL(process.argv[2]));
await client.connect(t);
for (const [name, args] of [["conf__test_sampling", {prompt: "x"}], ["conf__test_elicitation", {message: "m"}], ["everything__trigger-sampling-request", {prompt: "hello", maxTokens: 10}], ["everything__get-roots-list", {}]]) {
  const t0 = Date.now();
  try { const r = await client.callTool({ name, arguments: args }, { timeout: 8000 }); console.log(name, Date.now()-t0, JSON.stringify(r).slice(0, 150)); } catch (e) { console.log(name, 'ERR', e.message); }
}
await t.terminateSession(); await client.close();
