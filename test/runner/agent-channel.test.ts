// The agents' socket under attack: the runner's end (agent-hub.ts, as `npm run build` ships it)
// in a process of its own, so that its peak memory (VmHWM) is what a stranger's bytes cost it, and
// the real agent (agent/agent.c) as the one peer it must still take. Before any hello, only a
// connection that shows its container's key is read, and only up to a small frame; once every
// agent said hello, the socket and the keys are gone.
import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { agentBinary } from "../harness/agent-binary.js";

const HUB = join(import.meta.dirname, "../../dist/src/pod-runner/agent-hub.js");
const MIB = 1024 * 1024;

/** The hub's process: it answers each line on stdin with what it knows. */
const HUB_SCRIPT = `
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
const { openAgentHub } = await import(process.argv[1]);
const peak = () => Number(/VmHWM:\\s+(\\d+)/.exec(readFileSync("/proc/self/status", "utf8"))[1]) * 1024;
const more = process.argv[4] ? JSON.parse(process.argv[4]) : {};
const hub = await openAgentHub(process.argv[2], { expect: ["task-1"], helloMs: Number(process.argv[3]), ...more });
const say = () => process.stdout.write(JSON.stringify({
  peak: peak(),
  agents: hub.agents().map((agent) => agent.container),
  taken: hub.agents().map((agent) => ({ container: agent.container, pid: agent.pid, uid: agent.uid })),
  refusals: hub.refusals?.() ?? [],
}) + "\\n");
say();
createInterface({ input: process.stdin }).on("line", say);
`;

interface HubState {
  peak: number;
  agents: string[];
  taken: { container: string; pid: number; uid: number }[];
  refusals: string[];
}

interface HubProcess {
  socket: string;
  keys: string;
  ask(): Promise<HubState>;
  first: HubState;
}

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0).reverse()) cleanup();
});

async function startHub(
  helloMs = 10_000,
  more?: { expect: string[]; uids: Record<string, number>; group: number },
): Promise<HubProcess> {
  const dir = mkdtempSync(join(tmpdir(), "agent-channel-"));
  // Other users (the agents, as in a pod) reach the socket and the keys through it.
  chmodSync(dir, 0o711);
  const socket = join(dir, "runner.sock");
  const child: ChildProcess = spawn(
    process.execPath,
    ["--input-type=module", "-e", HUB_SCRIPT, HUB, socket, String(helloMs), more ? JSON.stringify(more) : ""],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  cleanups.push(() => {
    child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const waiting: Array<(state: HubState) => void> = [];
  lines.on("line", (line) => waiting.shift()?.(JSON.parse(line) as HubState));
  const next = () => new Promise<HubState>((resolve) => waiting.push(resolve));
  const first = await next();
  return {
    socket,
    keys: join(dir, "keys"),
    first,
    ask: () => {
      const answer = next();
      child.stdin?.write("\n");
      return answer;
    },
  };
}

/** A connection that sends `bytes` and resolves once the other end has closed it. */
function send(socket: string, bytes: Buffer): { closed: Promise<void>; conn: Socket } {
  const conn = connect(socket);
  conn.on("error", () => {});
  conn.on("connect", () => conn.write(bytes, () => {}));
  conn.resume();
  const closed = new Promise<void>((resolve) => conn.on("close", () => resolve()));
  cleanups.push(() => conn.destroy());
  return { closed, conn };
}

/** A frame as the wire has it: type, 4-byte big-endian length, payload. */
function frame(type: string, payload: Buffer, length = payload.length): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, "latin1");
  head.writeUInt32BE(length, 1);
  return Buffer.concat([head, payload]);
}

function startAgent(socket: string, container = "task-1", user?: { uid: number; gid: number }): ChildProcess {
  const agent = spawn(agentBinary().agent, [socket, container], { stdio: "ignore", ...(user ?? {}) });
  cleanups.push(() => agent.kill("SIGKILL"));
  return agent;
}

async function until<T>(look: () => Promise<T>, ok: (value: T) => boolean, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await look();
    if (ok(value) || Date.now() > end) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("the agents' socket, from the runner's side", () => {
  it("reads nothing of a connection without its container's key: 150 idle connections and three 1 MiB frames of NUL bytes cost the runner under 16 MiB, and the agent still gets in", async () => {
    const hub = await startHub();
    const idle = Array.from({ length: 150 }, () => send(hub.socket, Buffer.alloc(0)));
    // What the hostile review sent: well-formed hello frames of the largest size, all NUL bytes
    // (before the key check, each cost the runner some 600 MiB to decode).
    const nul = frame("H", Buffer.alloc(MIB));
    const floods = Array.from({ length: 3 }, () => send(hub.socket, nul));
    await Promise.all(floods.map((flood) => flood.closed));
    const flooded = await hub.ask();
    expect(flooded.peak - hub.first.peak).toBeLessThan(16 * MIB);
    expect(flooded.refusals).toContain("a connection without a valid key");
    // The crowd of idle connections gave way, oldest first: the agent still gets in.
    expect(flooded.refusals).toContain(
      "a connection that said no hello before others came (the oldest of too many)",
    );
    startAgent(hub.socket);
    const state = await until(hub.ask, (s) => s.agents.length === 1);
    expect(state.agents).toEqual(["task-1"]);
    // The rest of the crowd goes once every agent said hello.
    await Promise.all(idle.map((conn) => conn.closed));
  });

  it("caps what a peer with a key may send before its hello at 64 KiB, and echoes none of a bad hello", async () => {
    const hub = await startHub();
    const key = readFileSync(join(hub.keys, "task-1"));
    expect(key).toHaveLength(64);
    const big = send(hub.socket, Buffer.concat([key, frame("H", Buffer.alloc(MIB))]));
    const marker = "MARKER-FROM-THE-PEER";
    const bad = send(
      hub.socket,
      Buffer.concat([key, frame("H", Buffer.from(`task-1\0${marker}\0x\0/bin/sh`))]),
    );
    await Promise.all([big.closed, bad.closed]);
    const state = await hub.ask();
    expect(state.peak - hub.first.peak).toBeLessThan(16 * MIB);
    expect(state.refusals).toContain("frame of 1048576 bytes is over the limit of 65536");
    const badHello = state.refusals.find((text) => text.startsWith("bad hello frame"));
    expect(badHello).toMatch(/^bad hello frame \(4 fields\): field 1 /);
    expect(state.refusals.join("\n")).not.toContain(marker);
  });

  it("closes a connection that says no hello within the hello deadline", async () => {
    const hub = await startHub(500);
    const key = readFileSync(join(hub.keys, "task-1"));
    const started = Date.now();
    const quiet = send(hub.socket, key);
    await quiet.closed;
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    expect((await hub.ask()).refusals).toContain("a connection that said no hello within 500 ms");
  });

  it("takes no connection once every agent said hello: the socket and the keys are gone before any task runs", async () => {
    const hub = await startHub();
    startAgent(hub.socket);
    await until(hub.ask, (s) => s.agents.length === 1);
    expect(existsSync(hub.socket)).toBe(false);
    expect(existsSync(hub.keys)).toBe(false);
    const late = connect(hub.socket);
    const error = await new Promise<NodeJS.ErrnoException>((resolve) => late.on("error", resolve));
    expect(error.code).toBe("ENOENT");
  });
});

/**
 * A task of container task-1 (its user) that read task-2's key: it connects as task-2's agent,
 * claims task-2's user and the pid `claim` (its own when absent), and answers the runner's proof
 * with the nonce as its own process name. Prints each frame type the runner sent it, then CLOSED.
 */
const IMPOSTOR_SCRIPT = `
import { readFileSync } from "node:fs";
import { connect } from "node:net";
const [socket, keys, uid, claim] = process.argv.slice(1);
const key = readFileSync(keys + "/task-2");
const frame = (type, payload) => {
  const head = Buffer.alloc(5);
  head.write(type, 0, "latin1");
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
};
const conn = connect(socket);
conn.on("connect", () => {
  const hello = ["task-2", claim || String(process.pid), uid, "/bin/sh"].join("\\0");
  conn.write(Buffer.concat([key, frame("H", Buffer.from(hello))]));
});
let got = Buffer.alloc(0);
conn.on("data", (chunk) => {
  got = Buffer.concat([got, chunk]);
  while (got.length >= 5 && got.length >= 5 + got.readUInt32BE(1)) {
    const type = got.toString("latin1", 0, 1);
    const payload = got.subarray(5, 5 + got.readUInt32BE(1));
    got = got.subarray(5 + payload.length);
    process.stdout.write(type + "\\n");
    if (type === "N") {
      process.title = payload.toString("latin1");
      conn.write(frame("N", Buffer.alloc(0)));
    }
  }
});
conn.on("error", () => {});
conn.on("close", () => process.stdout.write("CLOSED\\n"));
`;

async function impostor(
  hub: HubProcess,
  user: { uid: number; gid: number },
  claim: { uid: number; pid?: number },
): Promise<string[]> {
  const child = spawn(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      IMPOSTOR_SCRIPT,
      hub.socket,
      hub.keys,
      String(claim.uid),
      claim.pid === undefined ? "" : String(claim.pid),
    ],
    { stdio: ["ignore", "pipe", "inherit"], ...user },
  );
  cleanups.push(() => child.kill("SIGKILL"));
  let out = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    out += chunk.toString();
  });
  // One the runner took stays connected: what it was sent by then is the answer.
  const ended = new Promise((resolve) => child.on("close", resolve));
  const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
  await ended;
  clearTimeout(timer);
  return out.split("\n").filter(Boolean);
}

// As in a pod, each container's agent and tasks under a user of their own: the runner may start
// a task before every agent said hello, while later containers' keys are still readable to it.
describe.skipIf(process.getuid?.() !== 0)(
  "the agents' socket, each container under a user of its own",
  () => {
    const GROUP = 2000;
    const ONE = { uid: 2001, gid: GROUP };
    const TWO = { uid: 2002, gid: GROUP };
    const more = {
      expect: ["task-1", "task-2"],
      uids: { "task-1": ONE.uid, "task-2": TWO.uid },
      group: GROUP,
    };

    it("a task of task-1 that read task-2's key cannot connect as task-2's agent: refused before a task reaches it, the key stays, and the real agent still gets in", async () => {
      const hub = await startHub(10_000, more);
      const first = startAgent(hub.socket, "task-1", ONE);
      let state = await until(hub.ask, (s) => s.agents.length === 1);
      expect(state.taken).toEqual([{ container: "task-1", pid: first.pid, uid: ONE.uid }]);
      // Taken, the agent has its own name back.
      expect(readFileSync(`/proc/${first.pid}/status`, "latin1")).toMatch(/^Name:\tagent$/m);

      // Claiming task-2's user, and its own pid, with the nonce as its name: its user gives it away.
      const own = await impostor(hub, ONE, { uid: TWO.uid });
      expect(own).toEqual(["N", "CLOSED"]);
      // Claiming a process of task-2's user (one that never saw the nonce): its name gives it away.
      const other = spawn("sleep", ["30"], { stdio: "ignore", ...TWO });
      cleanups.push(() => other.kill("SIGKILL"));
      const borrowed = await impostor(hub, ONE, { uid: TWO.uid, pid: other.pid as number });
      expect(borrowed).toEqual(["N", "CLOSED"]);

      state = await hub.ask();
      expect(state.agents).toEqual(["task-1"]);
      expect(
        state.refusals.some((r) =>
          /^container task-2: its process \(pid \d+\) does not run as the container's user 2002$/.test(r),
        ),
      ).toBe(true);
      expect(state.refusals).toContain(
        `container task-2: its process (pid ${other.pid}) did not show the nonce sent on its connection`,
      );
      // The key was not spent on them: the real agent of task-2 still gets in, and with it the socket goes.
      expect(existsSync(join(hub.keys, "task-2"))).toBe(true);
      const second = startAgent(hub.socket, "task-2", TWO);
      state = await until(hub.ask, (s) => s.agents.length === 2);
      expect(state.taken[1]).toEqual({ container: "task-2", pid: second.pid, uid: TWO.uid });
      expect(existsSync(hub.socket)).toBe(false);
    });

    it("refuses an agent that runs as another container's user, even with its own container's key", async () => {
      const hub = await startHub(10_000, more);
      // task-2's agent binary, run as task-1's user: its hello says so.
      startAgent(hub.socket, "task-2", ONE);
      const state = await until(hub.ask, (s) => s.refusals.length > 0);
      expect(state.refusals).toEqual(["container task-2: hello from user 2001, not the container's 2002"]);
      expect(state.agents).toEqual([]);
    });
  },
);
