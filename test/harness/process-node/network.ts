import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import net from "node:net";
import { onPath } from "./container-process.js";

/**
 * Relays connections made inside a pod's network namespace to 127.0.0.1:<port> (the API server's
 * port, as KUBERNETES_SERVICE_PORT says) over the node's unix socket, which reaches every network
 * namespace through the filesystem.
 */
const RELAY = `
const net = require("node:net");
const [port, socket] = process.argv.slice(1);
net
  .createServer((client) => {
    const upstream = net.connect(socket);
    client.pipe(upstream).pipe(client);
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
  })
  .listen(Number(port), "127.0.0.1", () => process.stdout.write("ready\\n"));
`;

let probedIp: string | null | undefined;

/**
 * `ip`, when this machine can give pods a network namespace of their own: as root (joining a
 * namespace owned by another user namespace is not worth it here), with iproute2 to bring up `lo`.
 */
export function detectNetworkNamespaces(): string | undefined {
  if (probedIp !== undefined) return probedIp ?? undefined;
  const ip = process.getuid?.() === 0 ? onPath("ip") : undefined;
  // Containers join the namespace with nsenter.
  const works =
    ip !== undefined &&
    onPath("nsenter") !== undefined &&
    spawnSync("unshare", ["--net", "--", ip, "link", "set", "lo", "up"], { stdio: "ignore", timeout: 5_000 })
      .status === 0;
  probedIp = works ? (ip ?? null) : null;
  return probedIp ?? undefined;
}

/** The node's side of the relays: a unix socket that pipes each connection to the API server. */
export async function startApiRelay(socketPath: string, host: string, port: number) {
  rmSync(socketPath, { force: true });
  const server = net.createServer((client) => {
    const upstream = net.connect(port, host);
    client.pipe(upstream).pipe(client);
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, resolve);
  });
  return {
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        rmSync(socketPath, { force: true });
      }),
  };
}

/**
 * A pod's network namespace, held by its relay process (the sandbox, as pause holds it for a
 * real pod): `lo` is up and 127.0.0.1:<apiPort> leads to the API server. Containers join it with
 * `nsenter --net=/proc/<pid>/ns/net`.
 */
export interface PodNetwork {
  /** The namespace to join. */
  readonly path: string;
  stop(): void;
}

/** Every relay this process started and that still runs, from its spawn on: a node stopping (or its process exiting) mid-setup must not leave one behind. */
const liveRelays = new Set<ChildProcess>();

/** SIGKILLs every pod network's relay this process started; for a node that stops or exits. */
export function killAllRelaysSync(): void {
  for (const relay of liveRelays) {
    try {
      if (relay.pid !== undefined && relay.exitCode === null) process.kill(relay.pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  }
}

export async function startPodNetwork(options: {
  ip: string;
  apiPort: number;
  relaySocket: string;
  cwd: string;
}): Promise<PodNetwork> {
  const script = `"$1" link set lo up && shift && exec "$@"`;
  const child: ChildProcess = spawn(
    "unshare",
    [
      "--net",
      "--",
      "sh",
      "-c",
      script,
      "sh",
      options.ip,
      process.execPath,
      "-e",
      RELAY,
      String(options.apiPort),
      options.relaySocket,
    ],
    // Its folder is the pod's, so cluster:down's sweep by working folder finds it too.
    { cwd: options.cwd, stdio: ["ignore", "pipe", "pipe"], detached: true },
  );
  liveRelays.add(child);
  child.once("exit", () => liveRelays.delete(child));
  let errors = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    errors += chunk.toString();
  });
  const stop = () => {
    try {
      if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  };
  let onEarlyExit: ((code: number | null) => void) | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      child.once("error", reject);
      onEarlyExit = (code) => reject(new Error(`pod network setup exited ${code}: ${errors.trim()}`));
      child.once("exit", onEarlyExit);
      child.stdout?.once("data", () => resolve());
      setTimeout(
        () => reject(new Error(`pod network setup gave no sign in 10s: ${errors.trim()}`)),
        10_000,
      ).unref();
    });
  } catch (error) {
    stop();
    throw error;
  } finally {
    if (onEarlyExit) child.off("exit", onEarlyExit);
  }
  return { path: `/proc/${child.pid}/ns/net`, stop };
}
