// An image registry for the dev cluster's real node: Debian's `docker-registry` (the CNCF
// distribution registry, v2), run in the network namespace the node's containerd pulls from and
// listening on 127.0.0.1 there, so nothing beyond this machine reaches it (and, where the node has
// a network namespace of its own, nothing beyond the node). The node's containerd is told to pull
// from it over plain HTTP by a `hosts.toml` in the node's registry config folder (containerd's
// `config_path`, under the cluster's state folder; never /etc/containerd). Images are pushed with
// the container engine from inside that namespace, `--tls-verify=false` as the registry is plain
// HTTP on loopback.
import { execFile, spawnSync } from "node:child_process";
import { existsSync, readFileSync, readlinkSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { stringify } from "yaml";
import { type ContainerEngine, containerEngine } from "../container-engine.js";
import { readClusterState } from "../control-plane.js";
import { ensurePrerequisites, installForbiddenByEnv, type Prerequisite } from "../prerequisites.js";
import {
  freePort,
  isRunning,
  logTail,
  type RecordedProcess,
  startProcess,
  stopProcess,
  waitFor,
} from "../processes.js";
import { REAL_NODE_DIR, realNodeRegistryConfigDir } from "./real-node.js";

const run = promisify(execFile);

/** Debian's package and its binary. */
export const REGISTRY_PACKAGE = "docker-registry";
const REGISTRY_BINARY = "/usr/bin/docker-registry";

export interface NodeRegistry {
  /** `127.0.0.1:PORT`, the registry part of image names the node pulls. */
  host: string;
  /** The network namespace it listens in (containerd's), as /proc/PID/ns/net names it. */
  netns: string;
  /** Its log (the access log shows who pulled what). */
  logFile: string;
  /** Pushes a local image of the engine as `<host>/<repository>:<tag>`; resolves with the manifest digest. */
  push(localImage: string, repository: string, tag: string): Promise<string>;
  /** Stops the registry and removes its data and the node's hosts.toml for it. */
  stop(): Promise<void>;
}

/** The registry as a prerequisite: installed as root with apt-get unless PLAYBOOK_NO_INSTALL says no. */
export const REGISTRY_PREREQUISITE: Prerequisite = {
  command: REGISTRY_BINARY,
  debianPackage: REGISTRY_PACKAGE,
  purpose: "the image registry the real node pulls the project's image from in the install test",
  optional: false,
  present: () => existsSync(REGISTRY_BINARY),
};

/** Says what is missing to run the registry, with the command that installs it; undefined when nothing. */
export function missingForRegistry(): string | undefined {
  if (existsSync(REGISTRY_BINARY)) return undefined;
  return `${REGISTRY_BINARY} is missing: apt-get install ${REGISTRY_PACKAGE} (the distribution registry; its service is not needed, the harness runs it)`;
}

/** `ctr` in the k8s.io namespace (the CRI's) of the real node of the cluster in `stateDir`. */
export async function nodeCtr(stateDir: string, args: string[]): Promise<string> {
  const socket = path.join(stateDir, REAL_NODE_DIR, "containerd.sock");
  const { stdout } = await run(which("ctr"), ["--address", socket, "--namespace", "k8s.io", ...args], {
    maxBuffer: 1 << 24,
  });
  return stdout;
}

/** Whether the node's containerd holds a blob (a manifest, a config, a layer) of that digest. */
export async function nodeHasContent(stateDir: string, digest: string): Promise<boolean> {
  return (await nodeCtr(stateDir, ["content", "ls", "--quiet"])).split("\n").includes(digest);
}

/** The pid of the node's containerd, from the cluster's state file. */
async function containerdPid(stateDir: string): Promise<number> {
  const state = await readClusterState(stateDir);
  const containerd = state?.processes.find((p) => p.name === "containerd");
  if (!containerd || !isRunning(containerd))
    throw new Error(`no running containerd of a real node is recorded in ${stateDir}/state.json`);
  return containerd.pid;
}

function which(command: string): string {
  const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", command], { encoding: "utf8" });
  return found.status === 0 ? found.stdout.trim() : command;
}

/**
 * Starts the registry beside the real node of the cluster in `stateDir` and configures that node's
 * containerd to pull from it. `log` gets one line per step.
 */
export async function startNodeRegistry(options: {
  stateDir: string;
  log: (message: string) => void;
  engine?: ContainerEngine;
}): Promise<NodeRegistry> {
  ensurePrerequisites({
    install: !installForbiddenByEnv(),
    log: options.log,
    prerequisites: [REGISTRY_PREREQUISITE],
  });
  const missing = missingForRegistry();
  if (missing) throw new Error(missing);
  const engine = options.engine ?? containerEngine();
  const pid = await containerdPid(options.stateDir);
  const netnsPath = `/proc/${pid}/ns/net`;
  const netns = readlinkSync(netnsPath);
  const dir = path.join(options.stateDir, "registry");
  await mkdir(path.join(dir, "data"), { recursive: true });
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const configFile = path.join(dir, "config.yml");
  await writeFile(
    configFile,
    stringify({
      version: 0.1,
      log: { level: "info", accesslog: { disabled: false } },
      storage: { filesystem: { rootdirectory: path.join(dir, "data") }, delete: { enabled: true } },
      http: { addr: host },
      health: { storagedriver: { enabled: false } },
    }),
  );
  const logFile = path.join(options.stateDir, "logs", "registry.log");
  await mkdir(path.dirname(logFile), { recursive: true });
  const started = startProcess(
    "registry",
    which("nsenter"),
    [`--net=${netnsPath}`, "--", REGISTRY_BINARY, "serve", configFile],
    { logFile },
  );
  // nsenter execs the registry: the same pid, another executable.
  const registry: RecordedProcess = { ...started, executable: REGISTRY_BINARY };
  let exited = false;
  void started.exited.then(() => {
    exited = true;
  });
  // A test worker killed before its teardown must not leave the registry running.
  const killOnExit = () => {
    try {
      if (isRunning(registry)) process.kill(registry.pid, "SIGKILL");
    } catch {
      // Gone meanwhile.
    }
  };
  process.once("exit", killOnExit);
  await waitFor(
    `the registry to listen on ${host}`,
    async () => (/listening on /.test(await readFile(logFile, "utf8")) ? true : undefined),
    {
      timeoutMs: 30_000,
      intervalMs: 50,
      abortIf: () => (exited ? `the registry exited:\n${logTail(logFile)}` : undefined),
    },
  );

  // containerd reads config_path's hosts.toml at each pull: no restart.
  const hostsDir = path.join(realNodeRegistryConfigDir(options.stateDir), host);
  await mkdir(hostsDir, { recursive: true });
  await writeFile(
    path.join(hostsDir, "hosts.toml"),
    [
      `server = "http://${host}"`,
      "",
      `[host."http://${host}"]`,
      `  capabilities = ["pull", "resolve"]`,
      "",
    ].join("\n"),
  );
  options.log(
    `Registry ${host} in containerd's network namespace (${netns}); node config ${hostsDir}/hosts.toml`,
  );

  return {
    host,
    netns,
    logFile,
    async push(localImage, repository, tag) {
      const target = `${host}/${repository}:${tag}`;
      const digestFile = path.join(dir, `${repository.replaceAll("/", "_")}-${tag}.digest`);
      await rm(digestFile, { force: true });
      // podman pushes from this process's network namespace; a Docker daemon would push from its own.
      if (engine.kind !== "podman")
        throw new Error(`pushing to the node's registry needs podman (the engine here is ${engine.kind})`);
      const pushArgs = [
        "push",
        "--tls-verify=false",
        `--digestfile=${digestFile}`,
        localImage,
        `docker://${target}`,
      ];
      try {
        const { stdout } = await run(
          which("nsenter"),
          [`--net=${netnsPath}`, "--", engine.command, ...pushArgs],
          { env: engine.env, maxBuffer: 1 << 24 },
        );
        const digest = existsSync(digestFile)
          ? readFileSync(digestFile, "utf8").trim()
          : (/digest: (sha256:[0-9a-f]{64})/.exec(stdout)?.[1] ?? "");
        options.log(`Pushed ${localImage} as ${target}@${digest}`);
        return digest;
      } catch (error) {
        const stderr = (error as { stderr?: string }).stderr ?? "";
        throw new Error(`${engine.command} push to ${target} failed: ${stderr.trim() || String(error)}`, {
          cause: error,
        });
      }
    },
    async stop() {
      process.off("exit", killOnExit);
      await stopProcess(registry);
      await rm(hostsDir, { recursive: true, force: true });
      await rm(dir, { recursive: true, force: true });
      options.log(`Stopped the registry ${host}`);
    },
  };
}
