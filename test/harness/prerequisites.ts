// What a dev cluster needs from this machine besides Node, checked before anything starts, so a
// missing piece stops `cluster:up` with the command that installs it instead of every Playbook
// ending RunnerLost later. Go is the third: tools/build.sh (run next, still before anything
// starts) fetches it when missing and stops with its own message when it cannot.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { reaperInstalled } from "./process-node/container-process.js";

export interface Prerequisite {
  /** The command that must be on PATH. */
  command: string;
  /** The Debian package that provides it. */
  debianPackage: string;
  /** What it is for, said when it is missing. */
  purpose: string;
  /** Without it the cluster starts anyway, with less (said on stderr). */
  optional: boolean;
  present: () => boolean;
}

function onPath(command: string): boolean {
  return (
    spawnSync("sh", ["-c", 'command -v "$1" >/dev/null', "sh", command], { stdio: "ignore" }).status === 0
  );
}

export const PREREQUISITES: readonly Prerequisite[] = [
  {
    command: "tini",
    debianPackage: "tini",
    purpose:
      "the process node's stand-in for the pod sandbox's reaping PID 1; every Playbook's pod shares its PID namespace and ends RunnerLost without it",
    optional: false,
    present: reaperInstalled,
  },
  {
    command: "unshare",
    debianPackage: "util-linux",
    purpose:
      "a PID namespace per pod, so a pod's processes end with it; without it the process node gives each pod a session and sweeps its processes by environment",
    optional: true,
    present: () => onPath("unshare"),
  },
  {
    command: "ip",
    debianPackage: "iproute2",
    purpose:
      "a network namespace per pod (as root), so that pods such as the Helm chart's two controller replicas can each listen on the same port; without it every pod shares this machine's network",
    optional: true,
    present: () => onPath("ip"),
  },
];

/** What the test suites need besides a cluster: Debian's Prometheus, which brings promtool. */
export const TEST_PREREQUISITES: readonly Prerequisite[] = [
  {
    command: "prometheus",
    debianPackage: "prometheus",
    purpose: "the monitoring tests evaluate the dashboard's and the alerts' queries in a real Prometheus",
    optional: false,
    present: () => onPath("prometheus"),
  },
  {
    command: "promtool",
    debianPackage: "prometheus",
    purpose: "the monitoring tests check and unit-test the alert rules and /metrics with promtool",
    optional: false,
    present: () => onPath("promtool"),
  },
];

const dockerPresent = (): boolean => onPath("docker");

/**
 * What building and testing the project's image needs: podman with runc (crun fails on cgroup
 * layouts such as this machine's), its CNI plugins for the containers' own networks, and
 * debootstrap for the stand-in base where no registry is reachable. Docker instead of podman
 * does as well (PLAYBOOK_CONTAINER_ENGINE, see test/harness/container-engine.ts).
 */
export const IMAGE_PREREQUISITES: readonly Prerequisite[] = [
  {
    command: "podman",
    debianPackage: "podman",
    purpose: "builds the project's image and runs it for the image tests (or docker, when that is installed)",
    optional: false,
    present: () => onPath("podman") || dockerPresent(),
  },
  {
    command: "runc",
    debianPackage: "runc",
    purpose: "the OCI runtime podman is configured with here (tools/podman/containers.conf)",
    optional: false,
    present: () => onPath("runc") || dockerPresent(),
  },
  {
    command: "/usr/lib/cni/bridge",
    debianPackage: "containernetworking-plugins",
    purpose: "the bridge network of the containers the image tests start",
    optional: false,
    present: () => existsSync("/usr/lib/cni/bridge") || dockerPresent(),
  },
  {
    command: "debootstrap",
    debianPackage: "debootstrap",
    purpose: "makes the stand-in for node:24-bookworm-slim where no image registry is reachable",
    optional: false,
    present: () => onPath("debootstrap") || dockerPresent(),
  },
];

/**
 * What `cluster:up --node real` needs besides the process node's: Debian's containerd with runc,
 * the CNI bridge plugin for the pods' network, and a C compiler with a static libc for the
 * locally built pause image (test/harness/real-node/pause.c).
 */
export const REAL_NODE_PREREQUISITES: readonly Prerequisite[] = [
  {
    command: "containerd",
    debianPackage: "containerd",
    purpose: "the container runtime the real kubelet drives",
    optional: false,
    present: () => onPath("containerd"),
  },
  {
    command: "runc",
    debianPackage: "runc",
    purpose: "the OCI runtime containerd is configured with",
    optional: false,
    present: () => onPath("runc"),
  },
  {
    command: "/usr/lib/cni/bridge",
    debianPackage: "containernetworking-plugins",
    purpose: "the pods' bridge network inside the real node's network namespace",
    optional: false,
    present: () => existsSync("/usr/lib/cni/bridge"),
  },
  {
    command: "nft",
    debianPackage: "nftables",
    purpose: "kube-proxy's nftables mode, which serves Services inside the real node's network namespace",
    optional: false,
    present: () => onPath("nft"),
  },
  {
    command: "gcc",
    debianPackage: "gcc",
    purpose: "compiles the pause image's program",
    optional: false,
    present: () => onPath("gcc") || onPath("cc"),
  },
  {
    command: "/usr/lib/x86_64-linux-gnu/libc.a",
    debianPackage: "libc6-dev",
    purpose: "the static libc the pause program is linked with",
    optional: false,
    present: () =>
      spawnSync(
        "sh",
        ["-c", "echo 'int main(void){return 0;}' | cc -static -x c -o /dev/null - 2>/dev/null"],
        {
          stdio: "ignore",
        },
      ).status === 0,
  },
];

/** `CLUSTER_NO_INSTALL` set (to anything but 0 or false) forbids installing packages. */
export function installForbiddenByEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  const value = env.CLUSTER_NO_INSTALL;
  return value !== undefined && value !== "" && value !== "0" && value !== "false";
}

export class MissingPrerequisiteError extends Error {}

/** "tini is not on PATH", or "/usr/lib/cni/bridge is missing" for a file. */
const absent = (p: Prerequisite): string =>
  `${p.command} is ${p.command.startsWith("/") ? "missing" : "not on PATH"}`;

const isRoot = (): boolean => process.getuid?.() === 0;

/** The one command a person runs to install it. */
export function installCommand(prerequisite: Prerequisite): string {
  return `${isRoot() ? "" : "sudo "}apt-get install ${prerequisite.debianPackage}`;
}

function aptInstall(packages: string[], log: (message: string) => void): void {
  const args = ["install", "-y", "--no-install-recommends", ...packages];
  log(`Installing ${packages.join(", ")}: apt-get ${args.join(" ")}`);
  // apt's output goes to stderr: stdout of cluster:up is kept for the KUBECONFIG line.
  const options = {
    stdio: ["ignore", 2, 2] as ["ignore", number, number],
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  };
  if (spawnSync("apt-get", args, options).status === 0) return;
  // A fresh machine may have no package lists yet.
  log("apt-get install failed; updating the package lists and trying again");
  spawnSync("apt-get", ["update", "-qq"], options);
  spawnSync("apt-get", args, options);
}

/**
 * Installs what is missing when running as root with apt-get and `install` allows it; then
 * throws MissingPrerequisiteError, one line per required command still missing, naming the
 * command that installs it. Optional ones still missing are only reported through `log`.
 */
export function ensurePrerequisites(options: {
  install: boolean;
  log: (message: string) => void;
  prerequisites?: readonly Prerequisite[];
}): void {
  const { log } = options;
  let missing = (options.prerequisites ?? PREREQUISITES).filter((p) => !p.present());
  if (missing.length === 0) return;
  if (options.install && isRoot() && onPath("apt-get")) {
    aptInstall([...new Set(missing.map((p) => p.debianPackage))], log);
    missing = missing.filter((p) => !p.present());
  }
  for (const prerequisite of missing.filter((p) => p.optional)) {
    log(`${absent(prerequisite)} (${prerequisite.purpose}); \`${installCommand(prerequisite)}\` installs it`);
  }
  const required = missing.filter((p) => !p.optional);
  if (required.length === 0) return;
  throw new MissingPrerequisiteError(
    required.map((p) => `${absent(p)} (${p.purpose}): install it with \`${installCommand(p)}\``).join("\n"),
  );
}
