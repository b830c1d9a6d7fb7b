// The task containers of a local run (`playbook run`): one per distinct task image, started with
// podman or docker as the pod's are (docs/design.md, "Tasks in their own images"): the agent
// bind-mounted read-only at /playbook/agent, the run dir (the runner's socket, the cancel files)
// read-only at /playbook/run, the run's workspace at /workspace, and the agent as the entrypoint,
// which connects back to the runner. The runner then drives every task through the agents.
//
// Each container is started attached (`run --rm`), from a client of its own process group: the
// terminal's Ctrl-C reaches the runner only, the client's exit says the container ended and its
// stderr says why (a failed pull, an agent that could not start). The container goes when its
// agent exits (the runner's quit, or a connection the runner's death closed: --rm), and stop()
// removes whatever is still there, whatever ended the run.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { quantityValue } from "../api/quantity.js";
import type { LocalEngine } from "./local-engine.js";

/** Where the task containers see what the run shares with them (the same paths as in a pod). */
export const AGENT_MOUNT = "/playbook/agent";
export const RUN_MOUNT = "/playbook/run";
export const WORKSPACE_MOUNT = "/workspace";
export const SOCKET_NAME = "runner.sock";

/** The label every task container of a run carries: `playbook.dev/run=RUN_ID`. */
export const RUN_LABEL = "playbook.dev/run";

export interface TaskContainer {
  /** task-1, task-2, ... in the order of first use, as the controller names them */
  name: string;
  image: string;
}

/**
 * The containers a run needs: one per distinct image, named task-K in the order of first use,
 * and each task's container (undefined for a task with no image, which runs on the host).
 */
export function planTaskContainers(images: readonly (string | undefined)[]): {
  containers: TaskContainer[];
  containerOf: (string | undefined)[];
} {
  const byImage = new Map<string, string>();
  const containerOf = images.map((image) => {
    if (image === undefined) return undefined;
    let name = byImage.get(image);
    if (name === undefined) {
      name = `task-${byImage.size + 1}`;
      byImage.set(image, name);
    }
    return name;
  });
  return { containers: [...byImage].map(([image, name]) => ({ name, image })), containerOf };
}

/** The agent and the shell it gives images without one. */
export interface AgentFiles {
  agent: string;
  /** a static busybox, mounted as /playbook/agent/busybox; absent: images without /bin/sh cannot run tasks */
  busybox?: string;
}

/**
 * Where the agent is: $PLAYBOOK_AGENT_DIR, else this checkout's build (tools/build-agent.sh
 * writes dist/agent), else where the image installs it (/usr/local/lib/playbook). The busybox
 * beside it, else Debian's busybox-static.
 */
export function findAgentFiles(env: NodeJS.ProcessEnv = process.env): AgentFiles | { error: string } {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [
    ...(env.PLAYBOOK_AGENT_DIR ? [resolve(env.PLAYBOOK_AGENT_DIR)] : []),
    // dist/src/pod-runner (tsc's build) and dist/bin (the bundled CLI) are both below dist/
    resolve(here, "..", "..", "agent"),
    resolve(here, "..", "agent"),
    "/usr/local/lib/playbook",
  ];
  const dir = candidates.find((candidate) => existsSync(join(candidate, "agent")));
  if (!dir) {
    return {
      error: `the task agent is not built: no agent in ${candidates.join(", ")} (tools/build-agent.sh builds it; PLAYBOOK_AGENT_DIR says where it is)`,
    };
  }
  const busybox = [join(dir, "busybox"), "/bin/busybox", "/usr/bin/busybox"].find((path) => existsSync(path));
  return { agent: join(dir, "agent"), ...(busybox ? { busybox } : {}) };
}

export interface StartOptions {
  engine: LocalEngine;
  runId: string;
  containers: readonly TaskContainer[];
  agent: AgentFiles;
  /** holds the runner's socket and the cancel files; mounted read-only */
  runDir: string;
  workspace: string;
  /** spec.resources.limits, as --memory and --cpus */
  limits?: { memory?: string; cpu?: string };
  /** each line the engine's client prints (a pull's progress, the agent's own errors) */
  onLine?: (container: string, line: string) => void;
}

export interface StartedContainer {
  name: string;
  image: string;
  /** the engine's name of the container: playbook-RUN_ID-task-K */
  engineName: string;
  /** settles when the container has ended (the client exited), with its last lines */
  ended: Promise<{ code: number | null; lines: string[] }>;
  hasEnded(): boolean;
}

export interface TaskContainers {
  containers: StartedContainer[];
  /** removes every container of the run (at once: the runner has ended what ran in them) and waits for it */
  stop(): Promise<void>;
}

const KEEP_LINES = 20;

/** The user inside the containers: the invoking user's ids, mapped to themselves by a rootless podman. */
export function userArgs(engine: LocalEngine): string[] {
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  const user = ["--user", `${uid}:${gid}`];
  if (engine.kind === "podman" && engine.rootless) return ["--userns", "keep-id", ...user];
  // rootless docker maps its root to the invoking user.
  if (engine.kind === "docker" && engine.rootless) return ["--user", "0:0"];
  return user;
}

export function runArgs(options: StartOptions, container: TaskContainer, engineName: string): string[] {
  const { agent } = options;
  const mounts = [
    "--volume",
    `${agent.agent}:${AGENT_MOUNT}/agent:ro`,
    ...(agent.busybox ? ["--volume", `${agent.busybox}:${AGENT_MOUNT}/busybox:ro`] : []),
    "--volume",
    `${options.runDir}:${RUN_MOUNT}:ro`,
    "--volume",
    `${options.workspace}:${WORKSPACE_MOUNT}`,
  ];
  const limits = [
    ...(options.limits?.memory ? ["--memory", memoryArg(options.limits.memory)] : []),
    ...(options.limits?.cpu ? ["--cpus", cpuArg(options.limits.cpu)] : []),
  ];
  return [
    "run",
    "--rm",
    "--sig-proxy=false",
    "--pull=missing",
    "--name",
    engineName,
    "--label",
    `${RUN_LABEL}=${options.runId}`,
    // The host's network, as the run's host tasks have: a task reaches what they reach.
    "--network",
    "host",
    // Where SELinux is enforcing, no label that would keep the container from the host's files it
    // mounts (the agent, the run dir, the workspace), and no relabelling of them either.
    "--security-opt",
    "label=disable",
    ...userArgs(options.engine),
    ...mounts,
    ...limits,
    "--workdir",
    WORKSPACE_MOUNT,
    "--entrypoint",
    `${AGENT_MOUNT}/agent`,
    container.image,
    `${RUN_MOUNT}/${SOCKET_NAME}`,
    container.name,
  ];
}

/** A Kubernetes memory quantity as the engines take it (bytes); one they cannot read is passed on as it is. */
export function memoryArg(quantity: string): string {
  const bytes = quantityValue(quantity);
  return Number.isFinite(bytes) ? String(Math.ceil(bytes)) : quantity;
}

/** A Kubernetes cpu quantity (2, 500m) as --cpus takes it. */
export function cpuArg(quantity: string): string {
  return quantity.endsWith("m") ? String(Number(quantity.slice(0, -1)) / 1000) : quantity;
}

function engineCommand(
  engine: LocalEngine,
  args: string[],
  timeoutMs: number,
): Promise<{ ok: boolean; out: string }> {
  return new Promise((done) => {
    execFile(engine.command, args, { timeout: timeoutMs, killSignal: "SIGKILL" }, (error, stdout, stderr) =>
      done({ ok: !error, out: `${stdout}${stderr}`.trim() }),
    );
  });
}

/** Starts every container (the agents then connect to the runner's socket on their own). */
export function startTaskContainers(options: StartOptions): TaskContainers {
  const clients: ChildProcess[] = [];
  const containers = options.containers.map((container): StartedContainer => {
    const engineName = `playbook-${options.runId}-${container.name}`;
    const client = spawn(options.engine.command, runArgs(options, container, engineName), {
      // Its own process group: the terminal's Ctrl-C is the runner's to handle, not the client's.
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    clients.push(client);
    const lines: string[] = [];
    let ended = false;
    const onData = (chunk: Buffer) => {
      for (const line of chunk.toString("utf8").split("\n")) {
        const text = line.trimEnd();
        if (!text) continue;
        lines.push(text);
        if (lines.length > KEEP_LINES) lines.shift();
        options.onLine?.(container.name, text);
      }
    };
    client.stdout?.on("data", onData);
    client.stderr?.on("data", onData);
    const endedPromise = new Promise<{ code: number | null; lines: string[] }>((settle) => {
      client.on("error", (error) => {
        lines.push(`${options.engine.command}: ${error.message}`);
        ended = true;
        settle({ code: null, lines });
      });
      client.on("close", (code) => {
        ended = true;
        settle({ code, lines });
      });
    });
    return { ...container, engineName, ended: endedPromise, hasEnded: () => ended };
  });
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      const names = containers.map((container) => container.engineName);
      // -t 0: whatever is still in them is already the runner's to have ended; --ignore: gone is fine.
      const args =
        options.engine.kind === "podman"
          ? ["rm", "--force", "--ignore", "--time", "0", ...names]
          : ["rm", "--force", ...names];
      await engineCommand(options.engine, args, 30_000);
      // The clients end with their containers; one that does not within 10 s is killed.
      const all = Promise.all(containers.map((container) => container.ended));
      const timer = setTimeout(() => {
        for (const client of clients) if (client.exitCode === null) client.kill("SIGKILL");
      }, 10_000);
      await all;
      clearTimeout(timer);
      // A container that the engine was still creating when rm ran: once more, now that every client is gone.
      const left = await listRunContainers(options.engine, options.runId);
      if (left.length > 0)
        await engineCommand(options.engine, [...args.slice(0, -names.length), ...left], 30_000);
    })();
    return stopping;
  };
  return { containers, stop };
}

/** The names of the containers (running or not) that carry the run's label. */
export async function listRunContainers(engine: LocalEngine, runId: string): Promise<string[]> {
  const result = await engineCommand(
    engine,
    ["ps", "--all", "--filter", `label=${RUN_LABEL}=${runId}`, "--format", "{{.Names}}"],
    30_000,
  );
  if (!result.ok) return [];
  return result.out
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean);
}
