/**
 * The e2e harness's own promises, end to end: a gateway it starts is stopped with its whole
 * process tree (the wrangler shim, the real wrangler, esbuild, workerd), even when the shim was
 * SIGKILLed first and the rest of the tree cannot act on SIGTERM (the SIGKILL after the bound);
 * its output is still captured; a gateway that cannot start fails the start at once, leaving
 * nothing running; and the server-everything upstream it starts listens on loopback only. Reads the process table (`ps -eo pid,ppid`, /proc/<pid>/stat) and /proc/net/tcp(6).
 * Owns the processes it starts here. Must never: leave one running, or use anything but loopback.
 */
import type { ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { freePort, groupMembers, isLoopbackListen, listeningOn, procStat, processTree, startEverything, startPortcullis } from "./harness.ts";

/** The tree under `pid` now: each process with its start time (to tell it from a later one with the same pid) and command line. */
function snapshot(pid: number): { pid: number; start: number; cmd: string }[] {
  return processTree(pid).flatMap((p) => {
    const st = procStat(p);
    if (!st || st.state === "Z") return [];
    let cmd = "";
    try {
      cmd = readFileSync(`/proc/${p}/cmdline`, "utf8").replaceAll("\0", " ");
    } catch {
      /* just exited */
    }
    return [{ pid: p, start: st.start, cmd }];
  });
}

/** Still running: the same process (same start time), not a zombie. */
function running(p: { pid: number; start: number }): boolean {
  const st = procStat(p.pid);
  return st !== null && st.start === p.start && st.state !== "Z" && st.state !== "X";
}

function probe(port: number): Promise<string> {
  return new Promise((res) => {
    const s = connect({ host: "127.0.0.1", port, timeout: 3000 });
    s.once("connect", () => {
      s.destroy();
      res("open");
    });
    s.once("timeout", () => {
      s.destroy();
      res("timeout");
    });
    s.once("error", (e: NodeJS.ErrnoException) => res(e.code ?? e.message));
  });
}

const CONFIG = `
actor: local:harness
upstreams:
  - name: remote
    url: https://upstream.example.com/mcp
`;

/** The tree of a started gateway: the shim (the group's leader), the real wrangler and workerd, all in the shim's process group. */
function expectGatewayTree(child: ChildProcess) {
  const pid = child.pid!;
  const tree = snapshot(pid);
  expect(tree[0]?.pid).toBe(pid);
  expect(tree[0]?.cmd).toContain(".bin/wrangler dev");
  expect(
    tree.some((p) => p.cmd.includes("wrangler-dist/cli.js")),
    tree.map((p) => p.cmd).join("\n"),
  ).toBe(true);
  expect(
    tree.some((p) => /workerd\S* serve/.test(p.cmd)),
    tree.map((p) => p.cmd).join("\n"),
  ).toBe(true);
  expect(tree.filter((p) => procStat(p.pid)?.pgrp !== pid).map((p) => p.cmd)).toEqual([]);
  expect(groupMembers(pid).sort()).toEqual(expect.arrayContaining(tree.map((p) => p.pid).sort()));
  return tree;
}

describe("the harness stops a gateway with its whole process tree", () => {
  it("stop(): SIGTERM to the group; afterwards no process of the tree runs and the port is closed; the output was captured", async () => {
    const port = await freePort();
    const gw = await startPortcullis(CONFIG, port);
    let stopped = false;
    try {
      const tree = expectGatewayTree(gw.child);
      expect(tree.length).toBeGreaterThanOrEqual(3);
      expect(gw.logs()).toContain(`Ready on http://127.0.0.1:${port}`);
      const t0 = Date.now();
      await gw.stop();
      stopped = true;
      console.log(`harness.test: stopped a gateway tree of ${tree.length} processes in ${Date.now() - t0} ms`);
      expect(tree.filter(running).map((p) => `${p.pid} ${p.cmd}`)).toEqual([]);
      expect(groupMembers(gw.child.pid!)).toEqual([]);
      expect(await probe(port)).toBe("ECONNREFUSED");
    } finally {
      if (!stopped) await gw.stop();
    }
  });

  it("stop() after the shim was SIGKILLed (its tree orphaned) and the rest frozen (SIGTERM cannot act): the bounded SIGKILL stops them all", async () => {
    const port = await freePort();
    const gw = await startPortcullis(CONFIG, port);
    let stopped = false;
    try {
      const pid = gw.child.pid!;
      const tree = expectGatewayTree(gw.child);
      // What killing only the shim used to do: the real wrangler and workerd live on, orphaned.
      const exited = new Promise((r) => gw.child.once("exit", r));
      process.kill(pid, "SIGKILL");
      await exited;
      const orphans = tree.filter((p) => p.pid !== pid);
      await new Promise((r) => setTimeout(r, 500));
      expect(orphans.filter(running).length, "orphans still running after the shim's SIGKILL").toBe(orphans.length);
      expect(await probe(port)).toBe("open");
      // Freeze them: a pending SIGTERM does nothing to a stopped process, so only the SIGKILL after the bound can end them.
      process.kill(-pid, "SIGSTOP");
      const t0 = Date.now();
      await gw.stop();
      stopped = true;
      const took = Date.now() - t0;
      console.log(`harness.test: stopped ${orphans.length} orphaned, frozen processes in ${took} ms (SIGKILL after the SIGTERM bound)`);
      expect(took).toBeGreaterThanOrEqual(7000);
      expect(tree.filter(running).map((p) => `${p.pid} ${p.cmd}`)).toEqual([]);
      expect(groupMembers(pid)).toEqual([]);
      expect(await probe(port)).toBe("ECONNREFUSED");
    } finally {
      if (!stopped) {
        try {
          process.kill(-gw.child.pid!, "SIGCONT");
        } catch {
          /* gone */
        }
        await gw.stop();
      }
    }
  });
});

/** Running processes (not zombies) whose command line contains `text`. */
function runningWith(text: string): string[] {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .flatMap((d) => {
      const st = procStat(Number(d));
      if (!st || st.state === "Z") return [];
      try {
        const cmd = readFileSync(`/proc/${d}/cmdline`, "utf8").replaceAll("\0", " ");
        return cmd.includes(text) ? [`${d} ${cmd}`] : [];
      } catch {
        return [];
      }
    });
}

describe("a start that fails", () => {
  it("a gateway that cannot start (its port is taken) makes startPortcullis reject at once, with its output, and leaves none of its processes running", async () => {
    const port = await freePort();
    const taken = createServer((socket) => socket.destroy());
    await new Promise<void>((res) => taken.listen(port, "127.0.0.1", res));
    try {
      const t0 = Date.now();
      const err = await startPortcullis(CONFIG, port).then(
        () => null,
        (e: Error) => e,
      );
      expect(err?.message).toMatch(/^exited while starting \(code [1-9]/);
      expect(err?.message).toContain("wrangler");
      expect(Date.now() - t0, "rejected well before the 90 s readiness bound").toBeLessThan(45_000);
      // The shim and the real wrangler carry `--port N`, workerd `entry=127.0.0.1:N`.
      expect([...runningWith(`--port ${port} `), ...runningWith(`=127.0.0.1:${port} `)]).toEqual([]);
    } finally {
      await new Promise((res) => taken.close(res));
    }
  });
});

describe("startEverything", () => {
  it("listens on loopback only (/proc/net/tcp, tcp6), answers on 127.0.0.1, and stop() leaves nothing running", async () => {
    const port = await freePort();
    const ev = await startEverything(port);
    let stopped = false;
    try {
      const sockets = listeningOn(port);
      expect(sockets.length, `listening sockets on ${port}`).toBeGreaterThan(0);
      expect(
        sockets.filter((a) => !isLoopbackListen(a)),
        `non-loopback listening sockets on ${port}`,
      ).toEqual([]);
      expect(await probe(port)).toBe("open");
      const r = await fetch(`http://127.0.0.1:${port}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "harness-e2e", version: "1" } },
        }),
      });
      expect(r.status).toBe(200);
      expect(await r.text()).toContain("serverInfo");
      const tree = snapshot(ev.child.pid!);
      expect(tree.length).toBeGreaterThanOrEqual(1);
      expect(tree[0]?.cmd).toContain("demo-upstream");
      await ev.stop();
      stopped = true;
      expect(tree.filter(running).map((p) => `${p.pid} ${p.cmd}`)).toEqual([]);
      expect(listeningOn(port)).toEqual([]);
    } finally {
      if (!stopped) await ev.stop();
    }
  });
});
