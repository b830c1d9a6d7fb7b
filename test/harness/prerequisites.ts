// What a dev cluster needs from this machine besides Node, checked before anything starts, so a
// missing piece stops `cluster:up` with the command that installs it instead of every Playbook
// ending RunnerLost later. Go is the third: tools/build.sh (run next, still before anything
// starts) fetches it when missing and stops with its own message when it cannot.
import { spawnSync } from "node:child_process";
import { type Dirent, existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { probeEngine } from "./container-engine.js";

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

/**
 * What the test suites need besides a cluster: Debian's Prometheus, which brings promtool; musl's
 * compiler and a static busybox for the task containers' agent.
 */
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
  {
    command: "musl-gcc",
    debianPackage: "musl-tools",
    purpose: "builds the task containers' agent static with musl (tools/build-agent.sh) for the agent tests",
    optional: false,
    present: () => onPath("musl-gcc"),
  },
  {
    command: "/bin/busybox",
    debianPackage: "busybox-static",
    purpose: "the agent's shell where a task's image has none (the agent tests and the test images)",
    optional: false,
    // Debian's busybox package is dynamically linked and names its loader; busybox-static does not.
    present: () =>
      spawnSync(
        "sh",
        ["-c", "[ -x /bin/busybox ] && ! LC_ALL=C grep -q -a -E '/ld-(linux|musl)' /bin/busybox"],
        {
          stdio: "ignore",
        },
      ).status === 0,
  },
];

/**
 * Docker stands in for podman and its helpers only when its daemon answers (a docker client with
 * no daemon is no engine) and PLAYBOOK_CONTAINER_ENGINE does not ask for podman.
 */
const dockerPresent = (): boolean =>
  process.env.PLAYBOOK_CONTAINER_ENGINE !== "podman" && probeEngine("docker").answers;

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
    purpose:
      "builds the project's image and runs it for the image tests (or docker, when its daemon answers)",
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
 * What `cluster:up` (a real node) needs: Debian's containerd with runc, the CNI bridge plugin for
 * the pods' network, util-linux and iproute2 for the node's own mount and network namespaces,
 * nftables for kube-proxy, openssl for the cluster's certificates, a C compiler with a static
 * libc for the locally built pause image (test/harness/real-node/pause.c), and libseccomp's
 * headers for the node's runc (tools/build-runc.sh).
 */
export const REAL_NODE_PREREQUISITES: readonly Prerequisite[] = [
  {
    command: "unshare",
    debianPackage: "util-linux",
    purpose: "the real node's own mount and network namespaces (unshare, nsenter)",
    optional: false,
    present: () => onPath("unshare") && onPath("nsenter"),
  },
  {
    command: "ip",
    debianPackage: "iproute2",
    purpose: "the loopback device and addresses of the real node's network namespace",
    optional: false,
    present: () => onPath("ip"),
  },
  {
    command: "openssl",
    debianPackage: "openssl",
    purpose: "the cluster's CA and the certificates of the API server, the node and the admin",
    optional: false,
    present: () => onPath("openssl"),
  },
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
  {
    command: "/usr/include/seccomp.h",
    debianPackage: "libseccomp-dev",
    purpose: "the headers tools/build-runc.sh builds the node's runc with seccomp against (cgo)",
    optional: false,
    present: () =>
      spawnSync("sh", ["-c", "echo '#include <seccomp.h>' | cc -E -x c - >/dev/null 2>&1"], {
        stdio: "ignore",
      }).status === 0,
  },
];

/** Whether installing Debian packages is declined, and by which variable. */
export interface InstallChoice {
  declined: boolean;
  /** The variable that decided, when one did. */
  by?: "PLAYBOOK_NO_INSTALL" | "CLUSTER_NO_INSTALL";
  /** Set when the deprecated CLUSTER_NO_INSTALL decided: the line to say about it. */
  deprecation?: string;
}

const isSet = (value: string | undefined): value is string => value !== undefined && value !== "";
const isTrue = (value: string): boolean => !["0", "false", "no"].includes(value.trim().toLowerCase());

/**
 * PLAYBOOK_NO_INSTALL=1 declines every Debian install (npm test's global setups, cluster:up,
 * image:build, image:base, the real node); 0 or false allows them. CLUSTER_NO_INSTALL is its
 * deprecated alias, read only when PLAYBOOK_NO_INSTALL is unset.
 */
export function installChoice(env: NodeJS.ProcessEnv = process.env): InstallChoice {
  if (isSet(env.PLAYBOOK_NO_INSTALL)) {
    return { declined: isTrue(env.PLAYBOOK_NO_INSTALL), by: "PLAYBOOK_NO_INSTALL" };
  }
  if (isSet(env.CLUSTER_NO_INSTALL)) {
    return {
      declined: isTrue(env.CLUSTER_NO_INSTALL),
      by: "CLUSTER_NO_INSTALL",
      deprecation: "CLUSTER_NO_INSTALL is deprecated: use PLAYBOOK_NO_INSTALL, which every path reads",
    };
  }
  return { declined: false };
}

/** Whether PLAYBOOK_NO_INSTALL (or the deprecated CLUSTER_NO_INSTALL) declines installing packages. */
export function installForbiddenByEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return installChoice(env).declined;
}

export class MissingPrerequisiteError extends Error {}

/** What a user without root or without Linux does instead of `cluster:up`. */
export const WITHOUT_ROOT_OR_LINUX =
  "Use any cluster you have instead (kind, k3d, minikube or a real one): build and push the image and " +
  "install the chart with `helm install playbook-controller charts/playbook-controller --namespace " +
  'playbook-system --create-namespace --set image.registry=... --wait`, as README.md\'s "Install on your cluster" says';

/**
 * Why this machine cannot run the dev cluster's real node (Kubernetes' own kubelet and
 * containerd need Linux and root), with what to do instead; undefined when it can.
 */
export function realNodeHostProblem(
  host: { platform: NodeJS.Platform; uid: number | undefined } = {
    platform: process.platform,
    uid: process.getuid?.(),
  },
): string | undefined {
  const why =
    host.platform !== "linux"
      ? `this is ${host.platform}, not Linux`
      : host.uid !== 0
        ? `this runs as uid ${host.uid ?? "unknown"}, not root`
        : undefined;
  if (!why) return undefined;
  return [
    `the dev cluster's node is Kubernetes' own kubelet with containerd, which need Linux and root; ${why}, so nothing was started`,
    ...(host.platform === "linux" ? ["As root it runs here"] : []),
    WITHOUT_ROOT_OR_LINUX,
  ].join("\n");
}

/** "tini is not on PATH", or "/usr/lib/cni/bridge is missing" for a file. */
const absent = (p: Prerequisite): string =>
  `${p.command} is ${p.command.startsWith("/") ? "missing" : "not on PATH"}`;

const isRoot = (): boolean => process.getuid?.() === 0;

/** The one command a person runs to install these packages. */
export function aptInstallLine(packages: readonly string[], root = isRoot()): string {
  return `${root ? "" : "sudo "}apt-get install ${[...new Set(packages)].join(" ")}`;
}

/** The one command a person runs to install it. */
export function installCommand(prerequisite: Prerequisite): string {
  return aptInstallLine([prerequisite.debianPackage]);
}

/** The packages apt would install, from `apt-get install -s` (a simulation: "Inst tini (0.19.0-1 ...)"). */
export function aptSimulatedInstalls(simulation: string): string[] {
  return [...simulation.matchAll(/^Inst (\S+)/gm)].map((match) => match[1] ?? "").filter(Boolean);
}

/** "332 MB": the sum of the Installed-Size fields (kB) of `apt-cache show --no-all-versions`. */
export function aptInstalledSize(show: string): string | undefined {
  const kB = [...show.matchAll(/^Installed-Size: (\d+)/gm)].reduce((sum, match) => sum + Number(match[1]), 0);
  return kB > 0 ? `${(kB / 1000).toFixed(kB < 10_000 ? 1 : 0)} MB` : undefined;
}

/**
 * What the packages and the dependencies apt would add take on disk, when its package lists can
 * tell at once. Only a simulation (-s) and apt-cache: nothing is installed here (`apt-get install
 * --assume-no` would install whatever needs no question).
 */
function aptSize(packages: string[]): string | undefined {
  const options = {
    encoding: "utf8" as const,
    timeout: 15_000,
    env: { ...process.env, LC_ALL: "C" },
    stdio: ["ignore", "pipe", "ignore"] as ["ignore", "pipe", "ignore"],
  };
  const simulated = spawnSync("apt-get", ["install", "-s", "--no-install-recommends", ...packages], options);
  const installs = aptSimulatedInstalls(simulated.stdout ?? "");
  if (installs.length === 0) return undefined;
  return aptInstalledSize(
    spawnSync("apt-cache", ["show", "--no-all-versions", ...installs], options).stdout ?? "",
  );
}

/** The notice said before installing: what, why, how big, and how to decline. */
export function installNotice(packages: readonly string[], why: string, size: string | undefined): string {
  return (
    `Installing the Debian packages ${packages.join(", ")} as root with apt-get${size ? ` (${size} on disk)` : ""}: ` +
    `${why}. PLAYBOOK_NO_INSTALL=1 declines and prints the command instead`
  );
}

/** Where apt keeps its package lists; PLAYBOOK_APT_LISTS_DIR points the tests at a folder of their own. */
export function aptListsDir(env: NodeJS.ProcessEnv = process.env): string {
  return isSet(env.PLAYBOOK_APT_LISTS_DIR) ? env.PLAYBOOK_APT_LISTS_DIR : "/var/lib/apt/lists";
}

const HOUR_MS = 60 * 60 * 1000;

/** "30 hours", "3 days". */
function describeAge(ms: number): string {
  const hours = Math.floor(ms / HOUR_MS);
  return hours < 48 ? `${hours} hours` : `${Math.floor(hours / 24)} days`;
}

/**
 * Why apt's package lists want an `apt-get update` before an install: there are none, or the
 * newest is more than a day old (a fresh machine's image brings lists whose archives the mirror
 * has since removed). Undefined when they are fresh. The `partial` folder counts too: apt writes
 * in it on every update, while a list that did not change keeps the mirror's date.
 */
export function staleAptLists(dir: string, now = Date.now()): string | undefined {
  let entries: Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    entries = [];
  }
  const lists = entries.filter((entry) => entry.isFile() && entry.name !== "lock");
  if (lists.length === 0) return `apt has no package lists in ${dir}`;
  const written = [...lists, ...entries.filter((entry) => entry.isDirectory() && entry.name === "partial")];
  const newest = Math.max(...written.map((entry) => statSync(path.join(dir, entry.name)).mtimeMs));
  const age = now - newest;
  return age > 24 * HOUR_MS ? `apt's package lists are ${describeAge(age)} old` : undefined;
}

/**
 * Whether apt-get's output says it could not fetch a package, or that its lists do not know one:
 * both are what lists older than the mirror give, and an `apt-get update` may cure them.
 */
export function aptCouldNotFetch(output: string): boolean {
  return /Unable to fetch|Failed to fetch|404 +Not Found|maybe run apt-get update|Unable to locate package|has no installation candidate/.test(
    output,
  );
}

/** An install apt-get could not do: the message names the packages and the command to run. */
export class AptInstallError extends MissingPrerequisiteError {}

/** apt's error lines ("E: ..."), else its last line: what a failed install says in one place. */
function aptErrors(stderr: string): string {
  const lines = stderr
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean);
  const errors = lines.filter((line) => line.startsWith("E: "));
  return (errors.length > 0 ? errors : lines.slice(-1)).join(" ");
}

const aptEnv = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({ ...env, DEBIAN_FRONTEND: "noninteractive" });

/** `apt-get update`, its output on stderr. A failure is said, not thrown: the lists there are may do. */
export function aptUpdate(log: (message: string) => void, env: NodeJS.ProcessEnv = process.env): void {
  const updated = spawnSync("apt-get", ["update", "-qq"], { stdio: ["ignore", 2, 2], env: aptEnv(env) });
  if (updated.status !== 0) {
    log(
      `apt-get update failed (${updated.error?.message ?? `exit ${updated.status}`}): going on with the lists there are`,
    );
  }
}

/** Runs `apt-get update` when the package lists are stale (staleAptLists), saying why first. */
export function updateStaleAptLists(
  log: (message: string) => void,
  env: NodeJS.ProcessEnv = process.env,
  now = Date.now(),
): void {
  const stale = staleAptLists(aptListsDir(env), now);
  if (!stale) return;
  log(`${stale}: running apt-get update first`);
  aptUpdate(log, env);
}

/**
 * `apt-get install -y --no-install-recommends` of the packages, as root: runs `apt-get update`
 * first when the package lists are stale, and when the install fails to fetch, updates and tries
 * once more; each said through `log`. Throws AptInstallError naming the packages and the commands
 * to run when the install still fails. apt's output goes to stderr (stdout of cluster:up is kept
 * for the KUBECONFIG line); its errors are read there too, so they come after its progress.
 */
export function installDebianPackages(
  packages: readonly string[],
  options: { log: (message: string) => void; env?: NodeJS.ProcessEnv; now?: number },
): void {
  const { log, env = process.env } = options;
  const install = (): { ok: boolean; errors: string } => {
    const result = spawnSync("apt-get", ["install", "-y", "--no-install-recommends", ...packages], {
      stdio: ["ignore", 2, "pipe"],
      encoding: "utf8",
      maxBuffer: 1 << 24,
      env: aptEnv(env),
    });
    const stderr = result.stderr ?? "";
    process.stderr.write(stderr);
    return {
      ok: result.status === 0,
      errors: aptErrors(stderr) || (result.error?.message ?? `exit ${result.status}`),
    };
  };

  updateStaleAptLists(log, env, options.now);
  let attempt = install();
  if (attempt.ok) return;
  const couldNotFetch = aptCouldNotFetch(attempt.errors);
  if (couldNotFetch) {
    log(`apt-get install could not fetch (${attempt.errors}): running apt-get update and trying once more`);
    aptUpdate(log, env);
    attempt = install();
    if (attempt.ok) return;
  }
  const sudo = isRoot() ? "" : "sudo ";
  throw new AptInstallError(
    `apt-get could not install ${packages.join(", ")}${couldNotFetch ? ", even after apt-get update" : ""}: ${attempt.errors}\n` +
      `install them with \`${sudo}apt-get update && ${aptInstallLine(packages)}\``,
  );
}

/**
 * Installs what is missing when running as root with apt-get and `install` allows it, after a
 * notice line; then throws MissingPrerequisiteError naming each required command still missing
 * and ending with the one apt-get line that installs them all. Optional ones still missing are
 * only reported through `log`.
 */
export function ensurePrerequisites(options: {
  install: boolean;
  log: (message: string) => void;
  prerequisites: readonly Prerequisite[];
  /** Said in the notice before installing: what needs the packages; default: their purposes. */
  why?: string;
}): void {
  const { log } = options;
  let missing = options.prerequisites.filter((p) => !p.present());
  if (missing.length === 0) return;
  const choice = installChoice();
  if (choice.deprecation) log(choice.deprecation);
  let installFailure: string | undefined;
  if (options.install && isRoot() && onPath("apt-get")) {
    const why = options.why ?? [...new Set(missing.map((p) => `${p.command}: ${p.purpose}`))].join("; ");
    const packages = [...new Set(missing.map((p) => p.debianPackage))];
    log(installNotice(packages, why, aptSize(packages)));
    try {
      installDebianPackages(packages, { log });
    } catch (error) {
      if (!(error instanceof AptInstallError)) throw error;
      installFailure = error.message;
    }
    missing = missing.filter((p) => !p.present());
  }
  for (const prerequisite of missing.filter((p) => p.optional)) {
    log(`${absent(prerequisite)} (${prerequisite.purpose}); \`${installCommand(prerequisite)}\` installs it`);
  }
  const required = missing.filter((p) => !p.optional);
  if (required.length === 0) {
    if (installFailure) log(installFailure);
    return;
  }
  if (installFailure) {
    throw new AptInstallError(
      [...required.map((p) => `${absent(p)} (${p.purpose})`), installFailure].join("\n"),
    );
  }
  const declined = options.install
    ? ""
    : ` (not installed: ${choice.declined && choice.by ? `${choice.by}=${process.env[choice.by]}` : "installing"} declined)`;
  const line = aptInstallLine(required.map((p) => p.debianPackage));
  if (required.length === 1 && required[0]) {
    const only = required[0];
    throw new MissingPrerequisiteError(
      `${absent(only)} (${only.purpose}): install it with \`${line}\`${declined}`,
    );
  }
  throw new MissingPrerequisiteError(
    [...required.map((p) => `${absent(p)} (${p.purpose})`), `install them with \`${line}\`${declined}`].join(
      "\n",
    ),
  );
}
