// The container engine this project builds and runs its image with: podman configured under the
// project's own folders (never /etc), or docker where its daemon answers and podman does not.
// An engine counts only when it answers: a docker client with no daemon is no engine.
//
// Stable interface (the image build, the image tests and the real node use it; keep it so):
//   podmanStateDir()       the folder holding podman's config copies, storage and sockets:
//                          $PLAYBOOK_PODMAN_DIR, else ${XDG_CACHE_HOME:-~/.cache}/playbook-controller/podman
//   containerEngine()      { kind: "podman" | "docker", command, env }: run `command` with `env`
//                          (for podman: CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and
//                          CONTAINERS_REGISTRIES_CONF pointing at tools/podman/*.conf filled in)
//   startEngineService()   a Docker-compatible socket for testcontainers: { env: DOCKER_HOST,
//                          TESTCONTAINERS_RYUK_DISABLED=true, TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1,
//                          stop() } — for podman, `podman system service` on a socket of its own
//                          under podmanStateDir()/sockets, stopped by stop(); for docker, its socket
// From a shell: `node dist/test/harness/container-engine.js env|service|kind` (see the end of this file).
import { type ChildProcess, execFile, execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { repoRoot } from "./binaries.js";

const run = promisify(execFile);

export interface ContainerEngine {
  kind: "podman" | "docker";
  /** The engine's command, run with env (which already includes process.env). */
  command: string;
  env: NodeJS.ProcessEnv;
}

export function podmanStateDir(): string {
  const cache = process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache");
  return path.resolve(process.env.PLAYBOOK_PODMAN_DIR || path.join(cache, "playbook-controller", "podman"));
}

function onPath(command: string): boolean {
  try {
    execFileSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/**
 * Writes the filled-in copies of tools/podman/*.conf under the state folder (only when they
 * changed, so concurrent users do not rewrite them under each other) and returns the variables
 * that make podman use them.
 */
export function podmanEnv(stateDir = podmanStateDir()): Record<string, string> {
  mkdirSync(stateDir, { recursive: true });
  const env: Record<string, string> = {};
  for (const [name, variable] of [
    ["containers.conf", "CONTAINERS_CONF"],
    ["storage.conf", "CONTAINERS_STORAGE_CONF"],
    ["registries.conf", "CONTAINERS_REGISTRIES_CONF"],
  ] as const) {
    const template = readFileSync(path.join(repoRoot(), "tools", "podman", name), "utf8");
    const text = template.replaceAll("@STATE_DIR@", stateDir);
    const target = path.join(stateDir, name);
    if (!existsSync(target) || readFileSync(target, "utf8") !== text) {
      writeFileSync(`${target}.${process.pid}`, text);
      execFileSync("mv", [`${target}.${process.pid}`, target]);
    }
    env[variable] = target;
  }
  return env;
}

/** What was seen of one engine: whether its command is on PATH and whether it answered. */
export interface EngineProbe {
  onPath: boolean;
  /** Whether `docker version` / `podman info` succeeded within ENGINE_PROBE_TIMEOUT_MS. */
  answers: boolean;
  /** Why it did not answer: the command's last line of stderr, or that it timed out. */
  error?: string;
}

export type EngineKind = ContainerEngine["kind"];

/**
 * Which engine to use, from what was seen of each: podman first (unless
 * PLAYBOOK_CONTAINER_ENGINE=docker), then docker (unless PLAYBOOK_CONTAINER_ENGINE=podman); an
 * engine counts only when it answers (a docker client with no daemon is no engine). Otherwise the
 * error says what was found and what to install or start. probe is called only as needed.
 */
export function chooseEngine(
  wanted: string | undefined,
  probe: (kind: EngineKind) => EngineProbe,
): { kind: EngineKind } | { error: string } {
  if (wanted !== undefined && wanted !== "" && wanted !== "podman" && wanted !== "docker") {
    return { error: `PLAYBOOK_CONTAINER_ENGINE is "${wanted}": it must be podman or docker (or unset)` };
  }
  const order: EngineKind[] =
    wanted === "docker" ? ["docker"] : wanted === "podman" ? ["podman"] : ["podman", "docker"];
  const silent: string[] = [];
  for (const kind of order) {
    const seen = probe(kind);
    if (!seen.onPath) continue;
    if (seen.answers) return { kind };
    silent.push(
      `${kind} is on PATH but does not answer (${ENGINE_PROBE[kind].join(" ")}: ${seen.error ?? "failed"})`,
    );
  }
  const install = "install podman (Debian: apt-get install podman runc containernetworking-plugins)";
  if (silent.length > 0) {
    const start = silent.some((line) => line.startsWith("docker")) ? "start the Docker daemon or " : "";
    return { error: `No working container engine: ${silent.join("; ")}; ${start}${install}` };
  }
  const which = wanted
    ? `${wanted} (PLAYBOOK_CONTAINER_ENGINE) is not on PATH`
    : "neither podman nor docker is on PATH";
  return {
    error: `No container engine: ${which}; ${install} or Docker; PLAYBOOK_CONTAINER_ENGINE=podman|docker chooses one when both answer`,
  };
}

/** The command that shows an engine answers: docker's asks its daemon, podman's opens its storage. */
export const ENGINE_PROBE: Record<EngineKind, string[]> = {
  docker: ["docker", "version", "--format", "{{.Server.Version}}"],
  podman: ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
};

/** How long an engine may take to answer before it counts as absent. */
export const ENGINE_PROBE_TIMEOUT_MS = Number(process.env.PLAYBOOK_ENGINE_PROBE_TIMEOUT_MS) || 20_000;

const probed = new Map<EngineKind, EngineProbe>();

/** Runs ENGINE_PROBE[kind] once per process (bounded by ENGINE_PROBE_TIMEOUT_MS) and remembers the answer. */
export function probeEngine(kind: EngineKind): EngineProbe {
  const known = probed.get(kind);
  if (known) return known;
  let seen: EngineProbe;
  if (!onPath(kind)) {
    seen = { onPath: false, answers: false };
  } else {
    const [command = kind, ...args] = ENGINE_PROBE[kind];
    const env = kind === "podman" ? { ...process.env, ...podmanEnv() } : process.env;
    const result = spawnSync(command, args, {
      env,
      encoding: "utf8",
      timeout: ENGINE_PROBE_TIMEOUT_MS,
      stdio: ["ignore", "pipe", "pipe"],
    });
    if (result.status === 0) {
      seen = { onPath: true, answers: true };
    } else {
      const lastLine = (result.stderr ?? "").trim().split("\n").filter(Boolean).at(-1);
      const timedOut = result.error && (result.error as NodeJS.ErrnoException).code === "ETIMEDOUT";
      seen = {
        onPath: true,
        answers: false,
        error: timedOut
          ? `no answer within ${ENGINE_PROBE_TIMEOUT_MS / 1000} s`
          : (lastLine ?? result.error?.message ?? `exit code ${result.status}`),
      };
    }
  }
  probed.set(kind, seen);
  return seen;
}

/** Forgets what probeEngine saw (after installing an engine, say). */
export function forgetEngineProbes(): void {
  probed.clear();
}

/** The engine that answers: podman (configured as above), else docker; else an error saying what to install or start. */
export function containerEngine(): ContainerEngine {
  const choice = chooseEngine(process.env.PLAYBOOK_CONTAINER_ENGINE, probeEngine);
  if ("error" in choice) throw new Error(choice.error);
  if (choice.kind === "podman")
    return { kind: "podman", command: "podman", env: { ...process.env, ...podmanEnv() } };
  return { kind: "docker", command: "docker", env: process.env };
}

/** Runs the engine with args and returns its stdout; a failure carries the engine's stderr. */
export async function engineRun(engine: ContainerEngine, args: string[]): Promise<string> {
  try {
    const { stdout } = await run(engine.command, args, { env: engine.env, maxBuffer: 64 << 20 });
    return stdout;
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr ?? "";
    throw new Error(`${engine.command} ${args.join(" ")} failed: ${stderr.trim() || String(error)}`, {
      cause: error,
    });
  }
}

export interface EngineService {
  /** DOCKER_HOST and the testcontainers settings for it. */
  env: Record<string, string>;
  stop(): Promise<void>;
}

function ping(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ socketPath: socket, path: "/_ping", timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("error", () => resolve(false));
    req.on("timeout", () => {
      req.destroy();
      resolve(false);
    });
    req.end();
  });
}

// Ryuk (testcontainers' reaper) is an image from Docker Hub, which is not reachable here: the
// tests remove their own containers instead. Mapped ports are reached on loopback, never through
// the machine's outward address.
const TESTCONTAINERS_ENV = {
  TESTCONTAINERS_RYUK_DISABLED: "true",
  TESTCONTAINERS_HOST_OVERRIDE: "127.0.0.1",
};

/** Starts `podman system service` on a socket of its own (or finds docker's) for testcontainers. */
export async function startEngineService(engine = containerEngine()): Promise<EngineService> {
  if (engine.kind === "docker") {
    const host = process.env.DOCKER_HOST ?? "unix:///var/run/docker.sock";
    return { env: { DOCKER_HOST: host, ...TESTCONTAINERS_ENV }, stop: async () => {} };
  }
  const sockets = path.join(podmanStateDir(), "sockets");
  mkdirSync(sockets, { recursive: true });
  const socket = path.join(sockets, `service-${process.pid}.sock`);
  rmSync(socket, { force: true });
  const logFile = path.join(sockets, `service-${process.pid}.log`);
  const out = openSync(logFile, "w");
  // conmon, which the service starts for each container, writes an empty file named `oom` into
  // its working directory when the container's memory limit kills a process: the service works
  // in a folder of its own, never in the checkout the tests run from.
  const workDir = mkdtempSync(path.join(os.tmpdir(), "podman-service-"));
  // --time=0: no idle timeout, the service lives until stop().
  const child: ChildProcess = spawn(engine.command, ["system", "service", "--time=0", `unix://${socket}`], {
    env: engine.env,
    cwd: workDir,
    stdio: ["ignore", out, out],
    detached: true,
  });
  const started = Date.now();
  while (!(await ping(socket))) {
    if (child.exitCode !== null || Date.now() - started > 30_000) {
      child.kill("SIGKILL");
      rmSync(workDir, { recursive: true, force: true });
      throw new Error(`podman system service did not answer on ${socket}: ${readFileSync(logFile, "utf8")}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    env: { DOCKER_HOST: `unix://${socket}`, ...TESTCONTAINERS_ENV },
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(socket, { force: true });
      rmSync(logFile, { force: true });
      rmSync(workDir, { recursive: true, force: true });
    },
  };
}

/**
 * Whether an image of that name is in the engine's local storage. Only the engine's own "no such
 * image" counts as absent: any other failure (an engine that stopped answering) is thrown, so it
 * is never read as "not built".
 */
export async function imageExists(engine: ContainerEngine, name: string): Promise<boolean> {
  try {
    await run(engine.command, ["image", "inspect", "--format", "{{.Id}}", name], { env: engine.env });
    return true;
  } catch (error) {
    const stderr = String((error as { stderr?: string }).stderr ?? "");
    if (/no such image|image not known|failed to find image/i.test(stderr)) return false;
    throw new Error(`${engine.command} image inspect ${name} failed: ${stderr.trim() || String(error)}`, {
      cause: error,
    });
  }
}

function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

// `node dist/test/harness/container-engine.js env` prints `export` lines for the engine's
// configuration; `... service` starts the service, prints its `export` lines once it answers and
// keeps running until SIGTERM or SIGINT (e.g. `eval "$(... service & echo ...)"` in a script).
if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  let engine: ContainerEngine;
  try {
    engine = containerEngine();
  } catch (error) {
    process.stderr.write(`container-engine: ${(error as Error).message}\n`);
    process.exit(1);
  }
  if (process.argv[2] === "kind") process.stdout.write(`${engine.kind}\n`);
  const print = (vars: Record<string, string>): void => {
    for (const [key, value] of Object.entries(vars))
      process.stdout.write(`export ${key}=${shellQuote(value)}\n`);
  };
  const mode = process.argv[2] ?? "env";
  if (mode === "kind") {
    // Printed above: which engine answers.
  } else if (mode === "env") {
    print(engine.kind === "podman" ? podmanEnv() : {});
  } else if (mode === "service") {
    const service = await startEngineService(engine);
    print(service.env);
    const stop = (): void => {
      void service.stop().then(() => process.exit(0));
    };
    process.once("SIGTERM", stop);
    process.once("SIGINT", stop);
    setInterval(() => {}, 1 << 30);
  } else {
    process.stderr.write("usage: container-engine.js env|service|kind\n");
    process.exitCode = 2;
  }
}
