// A real node for the dev cluster: Debian's containerd (with runc and the CNI bridge plugin) and
// a kubelet built from the same Kubernetes module as the control plane, joined as
// `system:node:real-node`.
//
// What they would change on this machine is kept off it:
// - Both run in a mount namespace of their own (held by a `sleep` started with `unshare`), with
//   empty tmpfs over /run and /var/lib: the kubelet's hard-coded device-plugins socket, its
//   bind mounts, containerd's shim sockets, runc's state, the pods' network namespace mounts and
//   every overlay rootfs live there and vanish with it.
// - The namespace holder also has a network namespace of its own, and containerd, the kubelet,
//   kube-proxy and the pods all live in it: the CNI bridge, the pods' veths, the forwarding
//   sysctl and kube-proxy's nftables tables are there, so this machine's network is untouched.
//   The kubelet's probes, containerd's exec/attach/port-forward streams and kube-proxy's
//   Services reach the pods over the bridge. That namespace has no link to this machine's and
//   no route out: it reaches the API server, and the API server reaches the kubelet, through two
//   relays (relay.ts), one in each namespace, joined by Unix sockets in the node's folder. In the
//   node's namespace the API server is at 127.0.0.1:PORT (the kubelet's and kube-proxy's
//   kubeconfigs, as on this machine) and at NODE_API_ADDRESS:PORT, the `kubernetes` Service's
//   endpoint; on this machine the kubelet is at 127.0.0.1:PORT, the node's published address.
// - Pods' cgroups go under a cgroup root named after the state folder, removed on stop.
// - The kernel sysctls the kubelet sets (vm.overcommit_memory, kernel.panic...) are recorded
//   before it starts and restored on stop; `makeIPTablesUtilChains: false` keeps it out of
//   iptables.
import { execFile, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, readlinkSync, rmdirSync, writeFileSync } from "node:fs";
import { chmod, mkdir, rm, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { stringify } from "yaml";
import { z } from "zod";
import { repoRoot } from "../binaries.js";
import { NODE_NAME, openssl } from "../certificates.js";
import { readClusterState, recordInClusterState } from "../control-plane.js";
import {
  freeFixedPort,
  isRunning,
  logTail,
  type RecordedProcess,
  type StartedProcess,
  startProcess,
  stopProcess,
  waitFor,
} from "../processes.js";
import { busyboxImageArchive, PAUSE_IMAGE, pauseImageArchive } from "./images.js";

const run = promisify(execFile);

export const REAL_NODE_NAME = NODE_NAME;
/** The real node's folder inside the cluster's state folder. */
export const REAL_NODE_DIR = "real-node";
/** The CNI bridge, inside the node's network namespace; never in this machine's. */
export const POD_BRIDGE = "pbdev0";
export const POD_SUBNET = "10.88.0.0/16";
/** The control plane's --service-cluster-ip-range; kube-proxy serves it in the node's namespace. */
export const SERVICE_SUBNET = "10.0.0.0/24";
/**
 * The API server's address inside the node's network namespace (on its loopback device, where
 * the relay listens): the control plane advertises it as the `kubernetes` Service's endpoint, so
 * kube-proxy sends pods' connections to 10.0.0.1:443 there. It exists in that namespace only.
 */
export const NODE_API_ADDRESS = "10.87.0.1";

/** Kernel settings the kubelet writes at start (`setupKernelTunables`), restored on stop. */
export const KUBELET_SYSCTLS = [
  "vm/overcommit_memory",
  "vm/panic_on_oom",
  "kernel/panic",
  "kernel/panic_on_oops",
  "kernel/keys/root_maxkeys",
  "kernel/keys/root_maxbytes",
] as const;

const hostRecordSchema = z.object({
  cgroupRoot: z.string().regex(/^playbook-dev-[0-9a-f]+$/),
  sysctls: z.record(z.string(), z.string()),
  containerdSocket: z.string(),
  mountNamespace: z.string().optional(),
  netNamespace: z.string().optional(),
});
type HostRecord = z.infer<typeof hostRecordSchema>;

export interface RealNodeOptions {
  stateDir: string;
  binDir: string;
  server: string;
  caFile: string;
  /** The node's client certificate (CN=system:node:real-node, O=system:nodes). */
  node: { certFile: string; keyFile: string };
  adminKubeconfig: string;
  daemon: boolean;
  /** Image archives to import besides pause and busybox (the project's image). */
  extraImages?: string[];
  record: (process: RecordedProcess, port?: { name: string; port: number }) => Promise<void>;
  log: (message: string) => void;
}

export interface RealNode {
  name: string;
  containerdSocket: string;
  /** Images present on the node, by name. */
  images: string[];
}

const nodeDir = (stateDir: string) => path.join(stateDir, REAL_NODE_DIR);
/** containerd's registry config folder (`config_path`): `<host:port>/hosts.toml` per registry. */
const registryConfigDir = (dir: string) => path.join(dir, "containerd", "certs.d");
/** The registry config folder of the real node of the cluster in `stateDir`. */
export const realNodeRegistryConfigDir = (stateDir: string): string => registryConfigDir(nodeDir(stateDir));
/**
 * Where the node's relay takes the API server's HTTP CONNECT requests (the control plane's
 * `cluster` egress selector), so the API server reaches the kubelet, pods and Services from the
 * node's network namespace.
 */
export const realNodeEgressSocket = (stateDir: string) => path.join(nodeDir(stateDir), "egress.sock");
/** Where the node's kubelet keeps the pods' container logs (`podLogsDir`), the rotated files too. */
export const realNodePodLogsDir = (stateDir: string) => path.join(nodeDir(stateDir), "pod-logs");
const hostRecordFile = (stateDir: string) => path.join(nodeDir(stateDir), "host.json");

/** What must be installed for a real node, with the Debian package that brings it. */
const NEEDED: { command: string; debianPackage: string }[] = [
  { command: "containerd", debianPackage: "containerd" },
  { command: "ctr", debianPackage: "containerd" },
  { command: "runc", debianPackage: "runc" },
  { command: "unshare", debianPackage: "util-linux" },
  { command: "nsenter", debianPackage: "util-linux" },
  { command: "ip", debianPackage: "iproute2" },
  // kube-proxy's nftables mode programs the node's namespace with the nft command.
  { command: "nft", debianPackage: "nftables" },
  { command: "openssl", debianPackage: "openssl" },
  { command: "cc", debianPackage: "gcc" },
  { command: "dpkg-deb", debianPackage: "dpkg" },
];
const CNI_BIN_DIRS = ["/usr/lib/cni", "/opt/cni/bin"];

function which(command: string): string | undefined {
  const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", command], { encoding: "utf8" });
  return found.status === 0 ? found.stdout.trim() : undefined;
}

/** Says what is missing for a real node and how to install it; empty when nothing is. */
export function missingForRealNode(): string[] {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push("root (containerd and the kubelet need it)");
  for (const { command, debianPackage } of NEEDED)
    if (!which(command)) missing.push(`${command} (apt-get install ${debianPackage})`);
  if (!CNI_BIN_DIRS.some((dir) => existsSync(path.join(dir, "bridge"))))
    missing.push("the CNI bridge plugin (apt-get install containernetworking-plugins)");
  return missing;
}

function cniBinDir(): string {
  return CNI_BIN_DIRS.find((dir) => existsSync(path.join(dir, "bridge"))) ?? CNI_BIN_DIRS[0] ?? "";
}

interface CgroupHierarchy {
  mount: string;
  /** v1 (`cgroup`, its controllers in `options`) or the unified one (`cgroup2`). */
  version: 1 | 2;
  /** The super options: a v1 hierarchy's controllers among them. */
  options: string[];
}

/** The cgroup hierarchies mounted here (v1 controllers and the unified one). */
function cgroupHierarchies(): CgroupHierarchy[] {
  const hierarchies: CgroupHierarchy[] = [];
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const [before, after] = line.split(" - ");
    const [fsType, , options = ""] = after?.split(" ") ?? [];
    const mount = before?.split(" ")[4];
    if ((fsType === "cgroup" || fsType === "cgroup2") && mount)
      hierarchies.push({ mount, version: fsType === "cgroup" ? 1 : 2, options: options.split(",") });
  }
  return hierarchies;
}

const cgroupMounts = (): string[] => cgroupHierarchies().map((h) => h.mount);

function readSysctl(name: string): string | undefined {
  try {
    return readFileSync(path.join("/proc/sys", name), "utf8").trim();
  } catch {
    return undefined;
  }
}

function namespaceOf(pid: number, kind: "mnt" | "net"): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/${kind}`);
  } catch {
    return undefined;
  }
}

const nsenterPath = () => which("nsenter") ?? "nsenter";

/** True once the process has exited; it may exec (nsenter, sh) on the way, which isRunning would miss. */
function exitFlag(started: StartedProcess): () => boolean {
  let exited = false;
  void started.exited.then(() => {
    exited = true;
  });
  return () => exited;
}

/** Starts `binary` through nsenter and records it once it has exec'd (so pids are matched on it). */
async function startInNamespaces(
  name: string,
  holderPid: number,
  namespaces: ("mnt" | "net")[],
  binary: string,
  args: string[],
  options: { logFile: string; daemon: boolean },
): Promise<StartedProcess> {
  const enter = namespaces.map(
    (kind) => `--${kind === "mnt" ? "mount" : "net"}=/proc/${holderPid}/ns/${kind}`,
  );
  const started = startProcess(name, nsenterPath(), [...enter, "--", binary, ...args], options);
  const execd = { ...started, executable: binary };
  const exited = exitFlag(started);
  await waitFor(`${name} to start`, async () => (isRunning(execd) ? true : undefined), {
    timeoutMs: 10_000,
    intervalMs: 20,
    abortIf: () => (exited() ? `${name} exited:\n${logTail(started.logFile)}` : undefined),
  });
  return execd;
}

/**
 * The CNI plugins containerd runs: Debian's. containerd runs them in its own network namespace,
 * the node's, so the bridge and the host ends of the pods' veths are made there, not here.
 */
async function writeCniPlugins(dir: string): Promise<void> {
  const binDir = path.join(dir, "cni", "bin");
  await mkdir(binDir, { recursive: true });
  const debian = cniBinDir();
  for (const plugin of ["bridge", "loopback", "host-local"])
    await symlink(path.join(debian, plugin), path.join(binDir, plugin));
}

/**
 * The node's containerd: tools/build.sh's (2.x, for image volumes) where it built one, else
 * Debian's; and its runc: tools/build-runc.sh's (1.2+, for the idmapped mounts of pods with their
 * own user namespace), linked into the same folder, else Debian's.
 */
function containerdBinaries(binDir: string): {
  containerd: string;
  ctr: string;
  shim?: string;
  runc: string;
  major: number;
} {
  const builtRunc = path.join(binDir, "runc");
  const runc = existsSync(builtRunc) ? builtRunc : (which("runc") ?? "runc");
  const built = path.join(binDir, "containerd");
  if (existsSync(built)) {
    return {
      containerd: built,
      ctr: path.join(binDir, "ctr"),
      shim: path.join(binDir, "containerd-shim-runc-v2"),
      runc,
      major: containerdMajor(built),
    };
  }
  const debian = which("containerd") ?? "/usr/bin/containerd";
  return { containerd: debian, ctr: which("ctr") ?? "ctr", runc, major: containerdMajor(debian) };
}

function containerdMajor(binary: string): number {
  const version = spawnSync(binary, ["--version"], { encoding: "utf8" }).stdout ?? "";
  return Number(/ v?(\d+)\.\d+/.exec(version)?.[1] ?? 1);
}

/** TOML by hand: only tables, strings, booleans, numbers and lists of strings are needed. */
function tomlTable(lines: string[], name: string, value: Record<string, unknown>): void {
  const nested: [string, Record<string, unknown>][] = [];
  lines.push("", `[${name}]`);
  for (const [key, v] of Object.entries(value)) {
    if (v !== null && typeof v === "object" && !Array.isArray(v))
      nested.push([key, v as Record<string, unknown>]);
    else lines.push(`  ${key} = ${JSON.stringify(v)}`);
  }
  for (const [key, v] of nested) tomlTable(lines, `${name}.${key}`, v);
}

/**
 * containerd 2.x's config (version 3): the CRI plugin split into its runtime, image and server
 * parts. The same settings as the 1.6 config below, and the shim built beside containerd.
 */
/**
 * What both config versions open with: the node's own root and state, the plugins it never uses
 * switched off, the socket, and every other listener off; `opt` in the node's folder.
 */
function containerdHead(version: 2 | 3, dir: string, socket: string, disabled: readonly string[]): string[] {
  const lines = [
    `version = ${version}`,
    `root = ${JSON.stringify(path.join(dir, "containerd", "root"))}`,
    `state = ${JSON.stringify(path.join(dir, "containerd", "state"))}`,
    `disabled_plugins = ${JSON.stringify(disabled)}`,
  ];
  tomlTable(lines, "grpc", { address: socket });
  for (const listener of ["ttrpc", "debug", "metrics"]) tomlTable(lines, listener, { address: "" });
  tomlTable(lines, `plugins."io.containerd.internal.v1.opt"`, { path: path.join(dir, "containerd", "opt") });
  return lines;
}

const UNUSED_PLUGINS = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
];

function containerdConfigV3(dir: string, socket: string, shim: string | undefined, runc: string): string {
  const lines = containerdHead(3, dir, socket, [...UNUSED_PLUGINS, "io.containerd.nri.v1.nri"]);
  tomlTable(lines, `plugins."io.containerd.cri.v1.runtime"`, {
    restrict_oom_score_adj: true,
    enable_selinux: false,
    disable_apparmor: true,
    tolerate_missing_hugetlb_controller: true,
    disable_hugetlb_controller: true,
    netns_mounts_under_state_dir: true,
    enable_cdi: false,
    containerd: {
      default_runtime_name: "runc",
      runtimes: {
        runc: {
          runtime_type: "io.containerd.runc.v2",
          ...(shim ? { runtime_path: shim } : {}),
          options: { SystemdCgroup: false, BinaryName: runc },
        },
      },
    },
    cni: {
      bin_dirs: [path.join(dir, "cni", "bin")],
      conf_dir: path.join(dir, "cni", "net.d"),
      max_conf_num: 1,
    },
  });
  tomlTable(lines, `plugins."io.containerd.cri.v1.images"`, {
    snapshotter: "overlayfs",
    pinned_images: { sandbox: PAUSE_IMAGE },
    registry: { config_path: registryConfigDir(dir) },
  });
  tomlTable(lines, `plugins."io.containerd.grpc.v1.cri"`, {
    stream_server_address: "127.0.0.1",
    stream_server_port: "0",
  });
  return `${lines.join("\n")}\n`;
}

function containerdConfig(dir: string, socket: string, runc: string): string {
  const cri = {
    restrict_oom_score_adj: true,
    sandbox_image: PAUSE_IMAGE,
    enable_selinux: false,
    disable_apparmor: true,
    tolerate_missing_hugetlb_controller: true,
    disable_hugetlb_controller: true,
    netns_mounts_under_state_dir: true,
    stream_server_address: "127.0.0.1",
    stream_server_port: "0",
    enable_cdi: false,
    containerd: {
      snapshotter: "overlayfs",
      default_runtime_name: "runc",
      runtimes: {
        runc: {
          runtime_type: "io.containerd.runc.v2",
          options: { SystemdCgroup: false, BinaryName: runc },
        },
      },
    },
    cni: { bin_dir: path.join(dir, "cni", "bin"), conf_dir: path.join(dir, "cni", "net.d"), max_conf_num: 1 },
    // One hosts.toml per registry host (test/harness/real-node/registry.ts writes them), read at
    // each pull: no registry is configured until one is written, and nothing in /etc is read.
    registry: { config_path: registryConfigDir(dir) },
  };
  const lines = containerdHead(2, dir, socket, ["io.containerd.snapshotter.v1.aufs", ...UNUSED_PLUGINS]);
  tomlTable(lines, `plugins."io.containerd.grpc.v1.cri"`, cri);
  return `${lines.join("\n")}\n`;
}

function cniConfig(dir: string): string {
  return JSON.stringify(
    {
      cniVersion: "1.0.0",
      name: "playbook-dev",
      plugins: [
        {
          type: "bridge",
          bridge: POD_BRIDGE,
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: "host-local",
            dataDir: path.join(dir, "cni", "ipam"),
            ranges: [[{ subnet: POD_SUBNET }]],
            routes: [{ dst: "0.0.0.0/0" }],
          },
        },
      ],
    },
    null,
    2,
  );
}

function kubeletConfig(options: {
  dir: string;
  socket: string;
  caFile: string;
  cgroupRoot: string;
  port: number;
  healthzPort: number;
}): string {
  return stringify({
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    address: "127.0.0.1",
    port: options.port,
    readOnlyPort: 0,
    healthzBindAddress: "127.0.0.1",
    healthzPort: options.healthzPort,
    // Only the API server (its kubelet client certificate is signed by the cluster CA) connects.
    authentication: {
      anonymous: { enabled: false },
      webhook: { enabled: false },
      x509: { clientCAFile: options.caFile },
    },
    authorization: { mode: "AlwaysAllow" },
    containerRuntimeEndpoint: `unix://${options.socket}`,
    // containerd 1.6 does not answer the RuntimeConfig call, so the kubelet takes this value.
    cgroupDriver: "cgroupfs",
    cgroupRoot: `/${options.cgroupRoot}`,
    failCgroupV1: false,
    failSwapOn: false,
    makeIPTablesUtilChains: false,
    podLogsDir: path.join(options.dir, "pod-logs"),
    // Small, often checked: a run printing tens of MiB is rotated under the log archive's follow
    // (test/real-node/log-archive.test.ts), as a long run's log is on a production node.
    containerLogMaxSize: "4Mi",
    containerLogMaxFiles: 2,
    containerLogMonitorInterval: "3s",
    // Imported images cannot be pulled again: never collect them.
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    evictionHard: { "memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%" },
    serializeImagePulls: false,
    shutdownGracePeriod: "0s",
    shutdownGracePeriodCriticalPods: "0s",
    resolvConf: "/etc/resolv.conf",
    rotateCertificates: false,
    serverTLSBootstrap: false,
    nodeStatusReportFrequency: "10s",
    nodeStatusUpdateFrequency: "5s",
    fileCheckFrequency: "20s",
    syncFrequency: "10s",
  });
}

async function writeKubeconfig(
  file: string,
  options: RealNodeOptions,
  user: string,
  cert: { certFile: string; keyFile: string },
): Promise<void> {
  await writeFile(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        {
          name: "playbook-dev",
          cluster: { server: options.server, "certificate-authority": options.caFile },
        },
      ],
      users: [{ name: user, user: { "client-certificate": cert.certFile, "client-key": cert.keyFile } }],
      contexts: [{ name: "playbook-dev", context: { cluster: "playbook-dev", user } }],
      "current-context": "playbook-dev",
    }),
    { mode: 0o600 },
  );
}

/** The relay's script, built by tsc beside this file (dist/test/harness/real-node/relay.js). */
function relayScript(): string {
  const script = path.join(repoRoot(), "dist", "test", "harness", "real-node", "relay.js");
  if (!existsSync(script)) throw new Error(`${script} is missing: run \`npm run build\` first`);
  return script;
}

/** One relay (relay.ts), here or in the node's network namespace; returns once it listens. */
async function startRelay(args: {
  name: string;
  dir: string;
  logDir: string;
  /** The namespaces' holder, for a relay in the node's network namespace. */
  holderPid: number | undefined;
  forwards: string[];
  extra?: string[];
  daemon: boolean;
  /** Called once it is started, before it listens: so that it is stopped whatever happens next. */
  record: (process: StartedProcess) => Promise<void>;
}): Promise<StartedProcess> {
  const { name, dir, logDir, holderPid } = args;
  const ready = path.join(dir, `${name}.ready`);
  await rm(ready, { force: true });
  const argv = [
    relayScript(),
    "--ready",
    ready,
    ...args.forwards.flatMap((f) => ["--forward", f]),
    ...(args.extra ?? []),
  ];
  const logFile = path.join(logDir, `${name}.log`);
  const started =
    holderPid !== undefined
      ? await startInNamespaces(name, holderPid, ["net"], process.execPath, argv, {
          logFile,
          daemon: args.daemon,
        })
      : startProcess(name, process.execPath, argv, { logFile, daemon: args.daemon });
  await args.record(started);
  await waitFor(`the ${name}`, async () => (existsSync(ready) ? true : undefined), {
    timeoutMs: 15_000,
    intervalMs: 20,
    abortIf: () => (isRunning(started) ? undefined : `${name} exited:\n${logTail(started.logFile)}`),
  });
  return started;
}

/**
 * The two relays between this machine's network namespace and the node's: the API server
 * (127.0.0.1:apiPort here) at 127.0.0.1:apiPort and NODE_API_ADDRESS:apiPort there, and the
 * kubelet (127.0.0.1:kubeletPort there) at 127.0.0.1:kubeletPort here, which the node publishes;
 * and the node's relay takes the API server's HTTP CONNECT requests on egress.sock, so its
 * logs, exec, port-forward and pods/proxy connections are dialed from the node's namespace.
 */
async function startRelays(args: {
  dir: string;
  logDir: string;
  holderPid: number;
  apiPort: number;
  kubeletPort: number;
  options: RealNodeOptions;
}): Promise<void> {
  const { dir, logDir, holderPid, apiPort, kubeletPort, options } = args;
  const apiSocket = path.join(dir, "apiserver.sock");
  const kubeletSocket = path.join(dir, "kubelet.sock");
  const common = { dir, logDir, daemon: options.daemon };
  await startRelay({
    ...common,
    name: "real-node-relay-host",
    holderPid: undefined,
    forwards: [
      `unix:${apiSocket}=tcp:127.0.0.1:${apiPort}`,
      `tcp:127.0.0.1:${kubeletPort}=unix:${kubeletSocket}`,
    ],
    record: (host) => options.record(host, { name: "kubelet", port: kubeletPort }),
  });
  await startRelay({
    ...common,
    name: "real-node-relay-node",
    holderPid,
    record: (node) => options.record(node),
    forwards: [
      `tcp:127.0.0.1:${apiPort}=unix:${apiSocket}`,
      `tcp:${NODE_API_ADDRESS}:${apiPort}=unix:${apiSocket}`,
      `unix:${kubeletSocket}=tcp:127.0.0.1:${kubeletPort}`,
    ],
    // The API server's connections to the kubelet, pods and Services, dialed from the node's namespace.
    extra: ["--connect-proxy", `unix:${path.join(dir, "egress.sock")}`],
  });
}

/**
 * Publishes a server of this machine's loopback (127.0.0.1:port) at the same address in the real
 * node's network namespace, where the API server's `cluster` egress selector dials webhooks
 * (admission and CRD conversion) from: a pair of relays, recorded in state.json (teardown,
 * cluster:down and the exit hooks stop them). Returns them, or nothing when `stateDir` holds no
 * real node (then the API server dials 127.0.0.1 from here itself).
 */
export async function publishHostPortOnNode(
  stateDir: string,
  name: string,
  port: number,
  options: {
    daemon: boolean;
    record: (process: RecordedProcess) => Promise<void>;
    /** Where the node's end listens (default 127.0.0.1; an APIService's endpoint may not be loopback). */
    nodeAddress?: string;
  },
): Promise<RecordedProcess[]> {
  if (!readHostRecord(stateDir)) return [];
  const state = await readClusterState(stateDir);
  const holder = runningRecorded(state?.processes ?? [], "real-node-namespaces");
  if (!holder) throw new Error(`the real node's namespaces are gone from ${stateDir}`);
  const dir = nodeDir(stateDir);
  const socket = path.join(dir, `${name}.sock`);
  await rm(socket, { force: true });
  const common = { dir, logDir: path.join(stateDir, "logs"), daemon: options.daemon, record: options.record };
  const host = await startRelay({
    ...common,
    name: `${name}-relay-host`,
    holderPid: undefined,
    forwards: [`unix:${socket}=tcp:127.0.0.1:${port}`],
  });
  const node = await startRelay({
    ...common,
    name: `${name}-relay-node`,
    holderPid: holder.pid,
    forwards: [`tcp:${options.nodeAddress ?? "127.0.0.1"}:${port}=unix:${socket}`],
  });
  return [node, host];
}

/** kube-proxy's client certificate: CN=system:kube-proxy, bound to system:node-proxier by default. */
async function kubeProxyCertificate(
  dir: string,
  caFile: string,
): Promise<{ certFile: string; keyFile: string }> {
  const keyFile = path.join(dir, "kube-proxy.key");
  const certFile = path.join(dir, "kube-proxy.crt");
  const csrFile = path.join(dir, "kube-proxy.csr");
  const extFile = path.join(dir, "kube-proxy.ext");
  await openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyFile]);
  await openssl(["req", "-new", "-key", keyFile, "-subj", "/CN=system:kube-proxy", "-out", csrFile]);
  await writeFile(
    extFile,
    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
  );
  await openssl([
    ...["x509", "-req", "-in", csrFile, "-CA", caFile, "-CAkey", path.join(path.dirname(caFile), "ca.key")],
    ...["-set_serial", `0x${randomBytes(16).toString("hex")}`, "-days", "30", "-sha256"],
    ...["-extfile", extFile, "-out", certFile],
  ]);
  return { certFile, keyFile };
}

function kubeProxyConfig(kubeconfig: string): string {
  return stringify({
    apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
    kind: "KubeProxyConfiguration",
    mode: "nftables",
    clientConnection: { kubeconfig },
    hostnameOverride: REAL_NODE_NAME,
    clusterCIDR: POD_SUBNET,
    // In the node's network namespace, like everything it serves.
    bindAddress: "127.0.0.1",
    healthzBindAddress: "127.0.0.1:10256",
    metricsBindAddress: "127.0.0.1:10249",
    // Every Service connection is masqueraded to the bridge's address: a pod's reply to another
    // pod on the same bridge is switched, not routed, and would bypass the un-DNAT otherwise
    // (no br_netfilter here). Nothing leaves the namespace: it has no route out.
    nftables: { masqueradeAll: true, syncPeriod: "30s", minSyncPeriod: "0s" },
    // 0 leaves the kernel's conntrack settings alone (nf_conntrack_max is this machine's).
    conntrack: {
      maxPerCore: 0,
      min: 0,
      tcpEstablishedTimeout: "0s",
      tcpCloseWaitTimeout: "0s",
      udpTimeout: "0s",
      udpStreamTimeout: "0s",
    },
    oomScoreAdj: 0,
  });
}

/** Starts kube-proxy (nftables mode) in the node's namespaces; waits for the `kubernetes` Service. */
async function startKubeProxy(args: {
  dir: string;
  logDir: string;
  holderPid: number;
  options: RealNodeOptions;
}): Promise<void> {
  const { dir, logDir, holderPid, options } = args;
  const binary = path.join(options.binDir, "kube-proxy");
  if (!existsSync(binary))
    throw new Error(`${binary} is missing: tools/build.sh builds it (npm run tools:bin)`);
  const cert = await kubeProxyCertificate(dir, options.caFile);
  const kubeconfig = path.join(dir, "kube-proxy.kubeconfig");
  await writeKubeconfig(kubeconfig, options, "system:kube-proxy", cert);
  await writeFile(path.join(dir, "kube-proxy.yaml"), kubeProxyConfig(kubeconfig));
  const kubeProxy = await startInNamespaces(
    "kube-proxy",
    holderPid,
    ["mnt", "net"],
    binary,
    [`--config=${path.join(dir, "kube-proxy.yaml")}`, "--v=1"],
    { logFile: path.join(logDir, "kube-proxy.log"), daemon: options.daemon },
  );
  await options.record(kubeProxy);
  const nft = which("nft") ?? "nft";
  await waitFor(
    "kube-proxy to program the kubernetes Service",
    async () => {
      const { stdout } = await run(nsenterPath(), [
        `--net=/proc/${holderPid}/ns/net`,
        "--",
        nft,
        "list",
        "table",
        "ip",
        "kube-proxy",
      ]).catch(() => ({ stdout: "" }));
      return stdout.includes(NODE_API_ADDRESS) ? true : undefined;
    },
    {
      timeoutMs: 60_000,
      intervalMs: 200,
      abortIf: () => (isRunning(kubeProxy) ? undefined : `kube-proxy exited:\n${logTail(kubeProxy.logFile)}`),
    },
  );
}

/** Starts containerd and the kubelet, imports the images and waits for the node to be Ready and schedulable. */
export async function startRealNode(options: RealNodeOptions): Promise<RealNode> {
  const { stateDir, log } = options;
  const missing = missingForRealNode();
  if (missing.length > 0) throw new Error(`a real node needs: ${missing.join("; ")}`);
  const dir = nodeDir(stateDir);
  const logDir = path.join(stateDir, "logs");
  await mkdir(path.join(dir, "cni", "net.d"), { recursive: true });
  await mkdir(path.join(dir, "pod-logs"), { recursive: true });
  // Traversable by every user, as /var/lib/containerd and /run/containerd are: the init of a pod
  // with its own user namespace (hostUsers: false) runs as a mapped, non-root user of the node and
  // reaches its rootfs under containerd's state folder (else: "remount-private ... permission denied").
  await mkdir(path.join(dir, "containerd"), { recursive: true });
  await chmod(path.join(dir, "containerd"), 0o711);
  const t0 = Date.now();
  const images = [await pauseImageArchive(), await busyboxImageArchive(log), ...(options.extraImages ?? [])];
  log(`Image archives ready after ${Date.now() - t0}ms`);

  const socket = path.join(dir, "containerd.sock");
  const cgroupRoot = `playbook-dev-${createHash("sha256").update(stateDir).digest("hex").slice(0, 12)}`;
  const record: HostRecord = { cgroupRoot, sysctls: {}, containerdSocket: socket };
  for (const name of KUBELET_SYSCTLS) {
    const value = readSysctl(name);
    if (value !== undefined) record.sysctls[name] = value;
  }
  // Written before anything starts, so a stop after any failure knows what to restore.
  await writeFile(hostRecordFile(stateDir), `${JSON.stringify(record, null, 2)}\n`);
  for (const mount of cgroupMounts()) await mkdir(path.join(mount, cgroupRoot), { recursive: true });

  const binaries = containerdBinaries(options.binDir);
  await writeFile(
    path.join(dir, "containerd.toml"),
    binaries.major >= 2
      ? containerdConfigV3(dir, socket, binaries.shim, binaries.runc)
      : containerdConfig(dir, socket, binaries.runc),
  );
  await writeFile(path.join(dir, "cni", "net.d", "10-playbook-dev.conflist"), cniConfig(dir));

  // The namespaces' holder: private mounts with /run and /var/lib emptied, and a network of its own.
  const ready = path.join(dir, "namespaces.ready");
  const holderStarted = startProcess(
    "real-node-namespaces",
    which("unshare") ?? "unshare",
    [
      ...["--mount", "--net", "--propagation", "private", "--", "sh", "-c"],
      `set -e; ip link set lo up; ip addr add ${NODE_API_ADDRESS}/32 dev lo; mount -t tmpfs -o mode=0755 run /run; mount -t tmpfs -o mode=0755 varlib /var/lib; : > "$1"; exec sleep infinity`,
      "sh",
      ready,
    ],
    { logFile: path.join(logDir, "real-node-namespaces.log"), daemon: options.daemon },
  );
  const holder = { ...holderStarted, executable: "sleep" };
  await options.record(holder);
  const holderExited = exitFlag(holderStarted);
  await waitFor(
    "the real node's namespaces",
    async () => (existsSync(ready) && isRunning(holder) ? true : undefined),
    {
      timeoutMs: 10_000,
      intervalMs: 20,
      abortIf: () => (holderExited() ? `unshare exited:\n${logTail(holderStarted.logFile)}` : undefined),
    },
  );
  record.mountNamespace = namespaceOf(holder.pid, "mnt");
  record.netNamespace = namespaceOf(holder.pid, "net");
  await writeFile(hostRecordFile(stateDir), `${JSON.stringify(record, null, 2)}\n`);

  await writeCniPlugins(dir);

  const containerdBinary = binaries.containerd;
  // containerd runs the CNI plugins, and serves exec/attach/port-forward streams to the kubelet
  // on 127.0.0.1, in the node's network namespace.
  const containerd = await startInNamespaces(
    "containerd",
    holder.pid,
    ["mnt", "net"],
    containerdBinary,
    ["--config", path.join(dir, "containerd.toml"), "--log-level", "warn"],
    { logFile: path.join(logDir, "containerd.log"), daemon: options.daemon },
  );
  await options.record(containerd);
  const ctr = (args: string[]) =>
    run(binaries.ctr, ["--address", socket, "--namespace", "k8s.io", ...args], {
      maxBuffer: 1 << 22,
    });
  await waitFor("containerd", async () => ((await ctr(["version"])) ? true : undefined), {
    timeoutMs: 30_000,
    intervalMs: 100,
    abortIf: () => (isRunning(containerd) ? undefined : `containerd exited:\n${logTail(containerd.logFile)}`),
  });
  log(
    `containerd ready after ${Date.now() - t0}ms (socket ${socket}; ${binaries.containerd}, ${binaries.major}.x)`,
  );

  for (const archive of images) await ctr(["images", "import", archive]);
  const { stdout: listed } = await ctr(["images", "list", "--quiet"]);
  const imageNames = listed.split("\n").filter((line) => line !== "" && !line.startsWith("sha256:"));
  log(`Imported ${imageNames.join(", ")}`);

  const kubeconfig = path.join(dir, "kubelet.kubeconfig");
  await writeKubeconfig(kubeconfig, options, `system:node:${REAL_NODE_NAME}`, options.node);
  // Free on this machine, where the relay listens on it, and outside the ephemeral range, which
  // the node's own outgoing connections draw from before the kubelet listens.
  const port = await freeFixedPort();
  const healthzPort = port === 10248 ? 10247 : 10248;
  const apiPort = Number(new URL(options.server).port);
  await startRelays({ dir, logDir, holderPid: holder.pid, apiPort, kubeletPort: port, options });
  await writeFile(
    path.join(dir, "kubelet.yaml"),
    kubeletConfig({ dir, socket, caFile: options.caFile, cgroupRoot, port, healthzPort }),
  );
  const kubelet = await startInNamespaces(
    "kubelet",
    holder.pid,
    ["mnt", "net"],
    path.join(options.binDir, "kubelet"),
    [
      `--config=${path.join(dir, "kubelet.yaml")}`,
      `--kubeconfig=${kubeconfig}`,
      `--root-dir=${path.join(dir, "kubelet")}`,
      `--cert-dir=${path.join(dir, "kubelet-pki")}`,
      `--hostname-override=${REAL_NODE_NAME}`,
      "--node-ip=127.0.0.1",
      "--v=1",
    ],
    { logFile: path.join(logDir, "kubelet.log"), daemon: options.daemon },
  );
  await options.record(kubelet);

  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(options.adminKubeconfig);
  const core = kubeConfig.makeApiClient(CoreV1Api);
  // The kubelet refuses a loopback --node-ip ("nodeIP can't be loopback address") and then leaves
  // the node's addresses alone; without --node-ip it would publish this machine's outward address.
  // So the harness publishes 127.0.0.1, where the kubelet serves, for the API server to reach it.
  await waitFor(
    `node ${REAL_NODE_NAME} registered`,
    async () => {
      await core.readNode({ name: REAL_NODE_NAME });
      return true;
    },
    {
      timeoutMs: 60_000,
      intervalMs: 100,
      abortIf: () => (isRunning(kubelet) ? undefined : `kubelet exited:\n${logTail(kubelet.logFile)}`),
    },
  );
  await run(path.join(options.binDir, "kubectl"), [
    `--kubeconfig=${options.adminKubeconfig}`,
    ...["patch", "node", REAL_NODE_NAME, "--subresource=status", "--type=merge", "-p"],
    JSON.stringify({
      status: {
        addresses: [
          { type: "InternalIP", address: "127.0.0.1" },
          { type: "Hostname", address: REAL_NODE_NAME },
        ],
      },
    }),
  ]);
  await waitFor(
    `node ${REAL_NODE_NAME} Ready without the not-ready taint`,
    async () => {
      const node = await core.readNode({ name: REAL_NODE_NAME });
      const ready = node.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";
      const tainted = (node.spec?.taints ?? []).some((t) => t.key.startsWith("node.kubernetes.io/not-ready"));
      return ready && !tainted ? true : undefined;
    },
    {
      timeoutMs: 90_000,
      intervalMs: 200,
      abortIf: () => (isRunning(kubelet) ? undefined : `kubelet exited:\n${logTail(kubelet.logFile)}`),
    },
  );
  await startKubeProxy({ dir, logDir, holderPid: holder.pid, options });
  log(`kube-proxy serves the node's Services (${SERVICE_SUBNET}) in its network namespace`);
  log(`Real node ${REAL_NODE_NAME} Ready after ${Date.now() - t0}ms (kubelet on 127.0.0.1:${port})`);
  return { name: REAL_NODE_NAME, containerdSocket: socket, images: imageNames };
}

/** The node's daemons a test may kill and start again (a crash, an upgrade, a node that stops reporting). */
export type RealNodeDaemon = "kubelet" | "containerd";

/** A daemon killed by killRealNodeDaemon: what startRealNodeDaemon starts again. */
export interface KilledDaemon {
  name: RealNodeDaemon;
  /** Its command line as /proc had it: the binary and the flags startRealNode gave it. */
  argv: string[];
  logFile: string;
}

/** The latest recorded process of that name that still runs (a restarted daemon is recorded again). */
function runningRecorded(processes: RecordedProcess[], name: string): RecordedProcess | undefined {
  return processes.filter((p) => p.name === name && isRunning(p)).at(-1);
}

/**
 * SIGKILLs the real node's kubelet or containerd alone, as a crash would: containerd's shims,
 * the containers and the pods' processes stay. Its command line is kept to start it again.
 */
export async function killRealNodeDaemon(stateDir: string, name: RealNodeDaemon): Promise<KilledDaemon> {
  const state = await readClusterState(stateDir);
  const daemon = runningRecorded(state?.processes ?? [], name);
  if (!daemon) throw new Error(`no ${name} of a real node runs in ${stateDir}`);
  const argv = readFileSync(`/proc/${daemon.pid}/cmdline`, "utf8").split("\0").slice(0, -1);
  process.kill(daemon.pid, "SIGKILL");
  await waitFor(`${name} (pid ${daemon.pid}) to exit`, async () => (isRunning(daemon) ? undefined : true), {
    timeoutMs: 10_000,
    intervalMs: 20,
  });
  return { name, argv, logFile: daemon.logFile };
}

/** A daemon paused by stopRealNodeDaemon: what continueRealNodeDaemon resumes. */
export interface StoppedDaemon {
  name: RealNodeDaemon;
  pid: number;
}

/**
 * SIGSTOPs the real node's kubelet or containerd: it stays alive and holds its connections
 * open, but answers nothing (a node that went silent, with a log follow open through it).
 */
export async function stopRealNodeDaemon(stateDir: string, name: RealNodeDaemon): Promise<StoppedDaemon> {
  const state = await readClusterState(stateDir);
  const daemon = runningRecorded(state?.processes ?? [], name);
  if (!daemon) throw new Error(`no ${name} of a real node runs in ${stateDir}`);
  process.kill(daemon.pid, "SIGSTOP");
  await waitFor(
    `${name} (pid ${daemon.pid}) to stop`,
    async () => (/^\S+ \(.*\) T /.test(readFileSync(`/proc/${daemon.pid}/stat`, "utf8")) ? true : undefined),
    { timeoutMs: 10_000, intervalMs: 20 },
  );
  return { name, pid: daemon.pid };
}

/** SIGCONTs a daemon stopRealNodeDaemon paused; one that is gone meanwhile is left. */
export function continueRealNodeDaemon(stopped: StoppedDaemon): void {
  try {
    process.kill(stopped.pid, "SIGCONT");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}

/**
 * Starts a daemon killed by killRealNodeDaemon again, with the same command line and log, in the
 * node's namespaces as startRealNode started it, and records it in state.json (teardown and
 * cluster:down stop it). Returns once it runs; the caller waits for what it needs of it.
 */
export async function startRealNodeDaemon(stateDir: string, killed: KilledDaemon): Promise<RecordedProcess> {
  const state = await readClusterState(stateDir);
  const holder = runningRecorded(state?.processes ?? [], "real-node-namespaces");
  if (!holder) throw new Error(`the real node's namespaces are gone from ${stateDir}`);
  const [binary, ...args] = killed.argv;
  if (!binary) throw new Error(`no command line recorded for ${killed.name}`);
  const started = await startInNamespaces(killed.name, holder.pid, ["mnt", "net"], binary, args, {
    logFile: killed.logFile,
    // The test's worker may exit before the cluster stops: the daemon must outlive it.
    daemon: true,
  });
  await recordInClusterState(stateDir, started);
  return started;
}

function readHostRecord(stateDir: string): HostRecord | undefined {
  try {
    return hostRecordSchema.parse(JSON.parse(readFileSync(hostRecordFile(stateDir), "utf8")));
  } catch {
    return undefined;
  }
}

/** Every pid in the node's pod cgroups (containers and pause), from each hierarchy given. */
function podCgroupPids(cgroupRoot: string, mounts = cgroupMounts()): number[] {
  const pids = new Set<number>();
  const walk = (dir: string): void => {
    let entries: string[];
    try {
      entries = readdirSync(dir);
    } catch {
      return;
    }
    if (entries.includes("cgroup.procs")) {
      for (const pid of readFileSync(path.join(dir, "cgroup.procs"), "utf8").split("\n"))
        if (/^\d+$/.test(pid)) pids.add(Number(pid));
    }
    for (const entry of entries) {
      const child = path.join(dir, entry);
      try {
        if (readdirSync(child)) walk(child);
      } catch {
        // A file, not a cgroup.
      }
    }
  };
  for (const mount of mounts) walk(path.join(mount, cgroupRoot));
  return [...pids];
}

/** The hierarchies that hold a cpuset: v1's cpuset one, or the unified one where it offers it. */
function cpusetHierarchies(): CgroupHierarchy[] {
  return cgroupHierarchies().filter((h) =>
    h.version === 1
      ? h.options.includes("cpuset")
      : readFileSync(path.join(h.mount, "cgroup.controllers"), "utf8").includes("cpuset"),
  );
}

/**
 * Confines the node's pods to `cpus` (a cpuset list, "1"): its pod cgroups' cpuset, as a node's
 * own cores would. Pinning containerd (taskset) does not reach them: runc resets a container's
 * affinity to its cgroup's cpuset, every CPU here. Pod cgroups made later inherit it. Throws when
 * the machine has no cpuset hierarchy to write. Returns what reads, each time it is called, the
 * CPU lists (`Cpus_allowed_list`) the processes in the pod cgroups may run on then.
 */
export function confineRealNodePods(stateDir: string, cpus: string): () => string[] {
  const record = readHostRecord(stateDir);
  if (!record) throw new Error(`no real node in ${stateDir}`);
  const hierarchies = cpusetHierarchies();
  if (hierarchies.length === 0) throw new Error("no cpuset cgroup hierarchy to confine the node's pods with");
  for (const { mount, version } of hierarchies) {
    const root = path.join(mount, record.cgroupRoot);
    if (version === 1) {
      // A child's CPUs must stay within its parent's, so the deepest are written first.
      const write = (dir: string): void => {
        for (const entry of readdirSync(dir, { withFileTypes: true }))
          if (entry.isDirectory()) write(path.join(dir, entry.name));
        writeFileSync(path.join(dir, "cpuset.cpus"), cpus);
      };
      write(root);
    } else {
      // The controller enabled down to the root; its children's CPUs are within it.
      writeFileSync(path.join(mount, "cgroup.subtree_control"), "+cpuset");
      writeFileSync(path.join(root, "cpuset.cpus"), cpus);
    }
  }
  const mounts = hierarchies.map((h) => h.mount);
  return () => {
    const lists = new Set<string>();
    for (const pid of podCgroupPids(record.cgroupRoot, mounts)) {
      try {
        const line = readFileSync(`/proc/${pid}/status`, "utf8").match(/^Cpus_allowed_list:\s*(\S+)/m);
        if (line?.[1]) lists.add(line[1]);
      } catch {
        // Gone since its cgroup was read.
      }
    }
    return [...lists];
  };
}

/** Processes started for this node that no recorded process group holds: containerd's shims. */
function shimPids(socket: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (argv.includes(socket)) pids.push(Number(entry));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}

/** Processes still in the node's mount namespace (its holder, containerd, the kubelet, shims). */
function pidsInNamespace(namespace: string | undefined, kind: "mnt" | "net"): number[] {
  if (!namespace) return [];
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry) && Number(entry) !== process.pid)
    .map(Number)
    .filter((pid) => namespaceOf(pid, kind) === namespace);
}

function killAll(pids: number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // Gone meanwhile.
    }
  }
}

function removeCgroups(cgroupRoot: string): string[] {
  const left: string[] = [];
  const remove = (dir: string): void => {
    let entries: string[];
    try {
      entries = readdirSync(dir, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name);
    } catch {
      return;
    }
    for (const entry of entries) remove(path.join(dir, entry));
    try {
      rmdirSync(dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") left.push(dir);
    }
  };
  for (const mount of cgroupMounts()) remove(path.join(mount, cgroupRoot));
  return left;
}

function restoreSysctls(record: HostRecord): void {
  for (const [name, value] of Object.entries(record.sysctls)) {
    if (readSysctl(name) === value) continue;
    writeFileSync(path.join("/proc/sys", name), value);
  }
}

/**
 * For exit hooks, which cannot wait long: SIGKILL what is in the node's namespaces (the kubelet,
 * containerd, kube-proxy, the holder), the pods' processes and containerd's shims, remove the
 * pods' cgroups once those have died (a few seconds at most), and put the sysctls back.
 */
export function killRealNodeSync(stateDir: string): void {
  const record = readHostRecord(stateDir);
  if (!record) return;
  // The kubelet and containerd first, so that nothing starts a container again.
  killAll([...pidsInNamespace(record.mountNamespace, "mnt"), ...pidsInNamespace(record.netNamespace, "net")]);
  killAll(podCgroupPids(record.cgroupRoot));
  killAll(shimPids(record.containerdSocket));
  const until = Date.now() + 3000;
  while (removeCgroups(record.cgroupRoot).length > 0 && Date.now() < until) {
    killAll(podCgroupPids(record.cgroupRoot));
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
  }
  try {
    restoreSysctls(record);
  } catch {
    // Restored at the next stop.
  }
}

/**
 * Stops the real node recorded in `stateDir`: the kubelet, every pod's processes, containerd's
 * shims, kube-proxy, containerd, the relays and the namespaces' holder (its network namespace,
 * with the bridge, the veths and kube-proxy's tables, goes with the last process in it); then removes its cgroups, restores the sysctls
 * and checks that nothing of it is left. A no-op when there is none.
 */
export async function stopRealNode(
  stateDir: string,
  recorded: RecordedProcess[],
  log: (message: string) => void,
): Promise<void> {
  const record = readHostRecord(stateDir);
  if (!record) return;
  // A daemon a test started again (startRealNodeDaemon) is only in state.json, not in `recorded`.
  const onDisk = (await readClusterState(stateDir).catch(() => undefined))?.processes ?? [];
  const named = (name: string) =>
    runningRecorded([...recorded, ...onDisk], name) ?? recorded.find((p) => p.name === name);
  const stop = async (name: string) => {
    const process = named(name);
    if (process && isRunning(process)) {
      await stopProcess(process);
      log(`Stopped ${name} (pid ${process.pid})`);
    }
  };
  // The kubelet first, so it does not restart what is killed next.
  await stop("kubelet");
  for (let pass = 0; pass < 50; pass += 1) {
    const pids = [...podCgroupPids(record.cgroupRoot), ...shimPids(record.containerdSocket)];
    if (pids.length === 0) break;
    killAll(pids);
    await sleep(100);
  }
  await stop("kube-proxy");
  await stop("containerd");
  await stop("real-node-relay-node");
  await stop("real-node-relay-host");
  await stop("real-node-namespaces");
  // Anything else that entered the namespaces (a stray nsenter) goes too.
  killAll([...pidsInNamespace(record.mountNamespace, "mnt"), ...pidsInNamespace(record.netNamespace, "net")]);
  let leftCgroups: string[] = [];
  for (let pass = 0; pass < 50; pass += 1) {
    leftCgroups = removeCgroups(record.cgroupRoot);
    if (leftCgroups.length === 0) break;
    await sleep(100);
  }
  restoreSysctls(record);
  const stillIn = [
    ...pidsInNamespace(record.mountNamespace, "mnt"),
    ...pidsInNamespace(record.netNamespace, "net"),
  ];
  const problems = [
    ...(stillIn.length > 0 ? [`processes still in the real node's namespaces: ${stillIn.join(", ")}`] : []),
    ...(leftCgroups.length > 0 ? [`cgroups left: ${leftCgroups.join(", ")}`] : []),
  ];
  if (problems.length > 0) throw new Error(`the real node did not stop cleanly: ${problems.join("; ")}`);
  await rm(hostRecordFile(stateDir), { force: true });
  // containerd's root and state (the images' and the containers' files, some 300 MB): with every
  // mount gone with the node's namespace, nothing holds them; the pods' logs stay.
  await rm(path.join(nodeDir(stateDir), "containerd"), { recursive: true, force: true });
  log("Stopped the real node: its namespaces, cgroups and sysctls are gone or restored");
}
