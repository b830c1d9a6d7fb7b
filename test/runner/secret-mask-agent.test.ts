// The secret mask in the agent layout: a task in a container of its own reaches the runner
// through its agent's O/E frames (agent-launcher.ts), here from the real static agent and a real
// shell printing a value in pieces, each its own frame.
import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, chownSync, copyFileSync, mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, describe, expect, it } from "vitest";
import { type AgentHub, openAgentHub } from "../../src/pod-runner/agent-hub.js";
import { agentLauncher } from "../../src/pod-runner/agent-launcher.js";
import { runAttempt } from "../../src/pod-runner/attempt.js";
import type { Launcher } from "../../src/pod-runner/launcher.js";
import { createSecretMask } from "../../src/pod-runner/secret-mask.js";
import { agentBinary } from "../harness/agent-binary.js";

/** `launcher`, with a copy of each chunk its streams give put in `seen` (the runner frees them). */
function copyingLauncher(launcher: Launcher, seen: Buffer[]): Launcher {
  return {
    async launch(spec) {
      const started = await launcher.launch(spec);
      if ("launched" in started) {
        for (const stream of started.launched.streams)
          stream.on("data", (chunk: Buffer) => seen.push(Buffer.from(chunk)));
      }
      return started;
    },
  };
}

const root = process.getuid?.() === 0;
/** As in a pod, the agent runs as a user of its own (one no other test uses). */
const uid = root ? 200_000 + ((process.pid + 7) % 50_000) : (process.getuid?.() ?? 0);
const gid = root ? uid : (process.getgid?.() ?? 0);
const PATH = "/usr/local/bin:/usr/bin:/bin";
const VALUE = "Zq7-pW2x9LmN4vB8kR3tY6uH1sD5fG0j";

let dir = "";
let hub: AgentHub | undefined;
let child: ChildProcess | undefined;
afterAll(async () => {
  await hub?.close();
  if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("secret mask through the agent", () => {
  it("prints *** for a value that comes in several agent frames", async () => {
    dir = mkdtempSync(join(tmpdir(), "mask-agent-"));
    chmodSync(dir, 0o755);
    copyFileSync(agentBinary().agent, join(dir, "agent"));
    chmodSync(join(dir, "agent"), 0o755);
    const work = join(dir, "work");
    mkdirSync(work);
    if (root) chownSync(work, uid, gid);
    const socket = join(dir, "run.sock");
    hub = await openAgentHub(socket, { expect: ["task-1"], ...(root ? { group: gid } : {}) });
    child = spawn(join(dir, "agent"), [socket, "task-1"], {
      env: {},
      stdio: "ignore",
      ...(root ? { uid, gid } : {}),
    });
    await hub.ready(5000);
    const written: Buffer[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        written.push(Buffer.from(chunk));
        callback();
      },
    });
    const seen: Buffer[] = [];
    // The value is in the task's env here (in a pod it is in a file the task reads); the printing
    // is the same: 5, 11 and 16 bytes, a sleep between them, then the value beside a redraw.
    const run =
      'printf %s "$(echo "$V" | cut -c1-5)"; sleep 0.2; printf %s "$(echo "$V" | cut -c6-16)"; sleep 0.2; ' +
      'printf "%s\\n" "$(echo "$V" | cut -c17-)"; printf "50%%\\r%s 90%%\\n" "$V" >&2; exit 2';
    const result = await runAttempt({
      taskName: "agent",
      run,
      env: { PATH, V: VALUE },
      cwd: realpathSync(work),
      attemptId: "mask.0.1",
      runCookie: "mask",
      cancelFileOf: (id) => join(work, id),
      deadline: null,
      stallMs: 0,
      killGraceMs: 0,
      drainWindowMs: 2000,
      sink,
      prefix: "[agent] ",
      tailBytes: 4096,
      mask: createSecretMask([VALUE]),
      launcher: copyingLauncher(agentLauncher(hub.agent("task-1")), seen),
    });
    await new Promise<void>((resolve) => sink.end(resolve));
    expect(result.exitCode).toBe(2);
    // The value came in pieces on stdout: its first 5 bytes in a frame of their own.
    expect(seen.map((chunk) => chunk.toString())).toContain(VALUE.slice(0, 5));
    const output = Buffer.concat(written).toString();
    expect(output.split("\n").sort()).toEqual(["", "[agent] ***", "[agent] 50%\r*** 90%"]);
    expect(result.tail.lastLine()).toEqual({ stream: "stderr", line: "50%\r*** 90%" });
  });
});
