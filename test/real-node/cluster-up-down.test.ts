// `npm run cluster:up` then `npm run cluster:down`, as a developer runs them: README.md's "On a
// cluster" commands as written, on a cluster of their own, with this machine's processes, mounts,
// network devices, routes, iptables chains, nftables tables, network namespaces, kernel settings
// and cgroups listed before, while it runs and after: nothing of the real node is left. And a
// real-node test run interrupted (Ctrl-C) while its setup starts the node, or while its tests run
// pods, leaves no process, namespace or cgroup behind.
import { execFile, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { cp, mkdtemp, rm, symlink } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, inject, it } from "vitest";
import { z } from "zod";
import { repoRoot } from "../harness/binaries.js";
import { marker, processesWithMarker } from "../harness/cluster-test.js";
import { type ClusterState, readClusterState } from "../harness/control-plane.js";
import { isListening, isRunning, waitFor } from "../harness/processes.js";
import { BUSYBOX_IMAGE } from "../harness/real-node/images.js";
import { KUBELET_SYSCTLS, POD_BRIDGE } from "../harness/real-node/real-node.js";

const run = promisify(execFile);

interface HostState {
  processes: string[];
  mounts: string[];
  links: string[];
  routes: string[];
  iptablesChains: string[];
  nftTables: string[];
  netNamespaces: string[];
  sysctls: Record<string, string>;
  cgroups: string[];
}

/** What of this machine a real node could change, limited to what can be told apart as its. */
function hostState(stateDir: string): HostState {
  const processes: string[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ");
      if (cmdline.includes(stateDir)) processes.push(`${entry} ${cmdline}`);
    } catch {
      // Gone meanwhile.
    }
  }
  const mounts = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => line.split(" ")[4] ?? "")
    .filter(
      (target) =>
        /^\/(run|var\/run)\/(netns|containerd)|^\/var\/lib\/(kubelet|containerd|cni)/.test(target) ||
        target.includes(stateDir),
    );
  const links = execFileSync("ip", ["-o", "link", "show"], { encoding: "utf8" })
    .split("\n")
    .map((line) => line.split(":")[1]?.trim().split("@")[0] ?? "")
    .filter((name) => name !== "");
  // Podman's bridge (10.88.0.0/16 too) and its containers' veths come and go with other work.
  const routes = ["-4", "-6"].flatMap((family) =>
    execFileSync("ip", [family, "route", "show", "table", "all"], { encoding: "utf8" })
      .split("\n")
      .filter((line) => line !== "" && !/ dev (veth|podman|cni-podman)/.test(line))
      .map((line) => `${family} ${line}`),
  );
  const nftTables = execFileSync("nft", ["list", "tables"], { encoding: "utf8" })
    .split("\n")
    .filter((line) => line !== "");
  const netNamespaces = [
    ...new Set(
      readdirSync("/proc")
        .filter((entry) => /^\d+$/.test(entry))
        .map((entry) => {
          try {
            return readlinkSync(`/proc/${entry}/ns/net`);
          } catch {
            return "";
          }
        })
        .filter((ns) => ns !== ""),
    ),
  ];
  const iptablesChains = ["iptables-save", "ip6tables-save"].flatMap((command) => {
    try {
      return execFileSync(command, { encoding: "utf8" })
        .split("\n")
        .filter((line) => line.startsWith(":"))
        .map((line) => `${command} ${line.split(" ")[0]}`);
    } catch {
      return [];
    }
  });
  // ip_forward: the bridge plugin turns it on where it runs, which must be the node's namespace.
  const sysctls = Object.fromEntries(
    [...KUBELET_SYSCTLS, "net/ipv4/ip_forward"].map((name) => [
      name,
      readFileSync(path.join("/proc/sys", name), "utf8").trim(),
    ]),
  );
  const cgroups = readdirSync("/sys/fs/cgroup").flatMap((controller) => {
    try {
      return readdirSync(path.join("/sys/fs/cgroup", controller))
        .filter((entry) => entry.startsWith("playbook-dev-") || entry === "kubepods")
        .map((entry) => `${controller}/${entry}`);
    } catch {
      return [];
    }
  });
  return { processes, mounts, links, routes, iptablesChains, nftTables, netNamespaces, sysctls, cgroups };
}

/** The sysctls as the suite's cluster found them (its real node's record) and as they are now. */
function suiteNodeSysctls(): { original: Record<string, string>; current: Record<string, string> } {
  const current = Object.fromEntries(
    KUBELET_SYSCTLS.map((name) => [name, readFileSync(path.join("/proc/sys", name), "utf8").trim()]),
  );
  const record = path.join(path.dirname(inject("kubeconfig")), "real-node", "host.json");
  if (!existsSync(record)) return { original: current, current };
  const { sysctls } = z
    .object({ sysctls: z.record(z.string(), z.string()) })
    .parse(JSON.parse(readFileSync(record, "utf8")));
  return { original: { ...current, ...sysctls }, current };
}

function writeSysctls(values: Record<string, string>): void {
  for (const [name, value] of Object.entries(values)) writeFileSync(path.join("/proc/sys", name), value);
}

/** What a checkout needs for the README's commands; node_modules is linked, dist/ built afresh. */
const CHECKOUT = [
  "package.json",
  "package-lock.json",
  "tsconfig.json",
  "tsconfig.build.json",
  "README.md",
  "LICENSE",
  "Dockerfile",
  ".dockerignore",
  "agent",
  "src",
  "scripts",
  "test",
  "tools",
  "crds",
  "examples",
];

/** The first sh block of README.md's "On a cluster" section. */
function readmeClusterBlock(): string {
  const readme = readFileSync(path.join(repoRoot(), "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## On a cluster"));
  const block = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error('README.md has no sh block under "## On a cluster"');
  return block;
}

/** The real node's record of the cluster in `stateDir` (its cgroup root and network namespace). */
function nodeRecord(stateDir: string): { cgroupRoot: string; netNamespace?: string | undefined } | undefined {
  const file = path.join(stateDir, "real-node", "host.json");
  if (!existsSync(file)) return undefined;
  return z
    .object({ cgroupRoot: z.string(), netNamespace: z.string().optional() })
    .parse(JSON.parse(readFileSync(file, "utf8")));
}

/** Processes in the cgroups under `cgroupRoot`, in every hierarchy: the pods' processes. */
function cgroupProcesses(cgroupRoot: string): string[] {
  const found: string[] = [];
  const walk = (dir: string): void => {
    let entries: string[];
    try {
      entries = readdirSync(dir);
    } catch {
      return;
    }
    if (entries.includes("cgroup.procs"))
      found.push(...readFileSync(path.join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean));
    for (const entry of entries) if (!entry.includes(".")) walk(path.join(dir, entry));
  };
  for (const controller of readdirSync("/sys/fs/cgroup"))
    walk(path.join("/sys/fs/cgroup", controller, cgroupRoot));
  return [...new Set(found)];
}

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup().catch(() => {});
});

describe("README's cluster commands", () => {
  it("run as written on a real node: TaskTimeout shows in kubectl get pb, hello succeeds, and cluster:down leaves nothing on this machine", async () => {
    const block = readmeClusterBlock();
    const down = "npm run cluster:down";
    for (const command of [
      "npm run image:build",
      'eval "$(npm run --silent cluster:up)"',
      'export PATH="$(npm run --silent tools:bin):$PATH"',
      "kubectl apply -f examples/task-timeout.yaml",
      "kubectl get pb -w",
      "kubectl apply -f examples/hello.yaml && kubectl wait --for=condition=Succeeded pb/hello --timeout=2m",
      down,
    ]) {
      expect(block, command).toContain(command);
    }
    // The commands up to cluster:down run first; this test looks at the running cluster, then the
    // rest runs. `-w` watches until interrupted: a reader stops it once the run shows TaskTimeout.
    const [upPart, downPart] = [block.slice(0, block.indexOf(down)), block.slice(block.indexOf(down))];
    const upScript = upPart.replace(
      /^kubectl get pb -w.*$/m,
      [
        "for _ in $(seq 1 90); do",
        "  kubectl get pb task-timeout --no-headers | grep -Eq '^task-timeout +Failed +TaskTimeout' && break",
        "  sleep 1",
        "done",
        "kubectl get pb task-timeout",
      ].join("\n"),
    );
    const copy = await mkdtemp(path.join(os.tmpdir(), "playbook-readme-checkout-"));
    const stateDir = await mkdtemp(path.join(os.tmpdir(), "playbook-readme-cluster-"));
    cleanups.push(async () => {
      if (existsSync(path.join(stateDir, "state.json")))
        await run(process.execPath, [path.join(copy, "dist", "scripts", "cluster-down.js")], {
          cwd: copy,
          env: { ...process.env, CLUSTER_STATE_DIR: stateDir },
        });
      await rm(copy, { recursive: true, force: true });
      await rm(stateDir, { recursive: true, force: true });
    });
    for (const entry of CHECKOUT)
      await cp(path.join(repoRoot(), entry), path.join(copy, entry), { recursive: true });
    await symlink(path.join(repoRoot(), "node_modules"), path.join(copy, "node_modules"));
    // What each npm command prints on stdout, as the reader's `$(...)` gets it, is kept beside,
    // in a file named after its arguments (`npm run --silent cluster:up`: run_--silent_cluster_up).
    const npmStdout = await mkdtemp(path.join(os.tmpdir(), "playbook-readme-stdout-"));
    cleanups.push(() => rm(npmStdout, { recursive: true, force: true }));
    const wrapper = 'npm() { command npm "$@" | tee "$NPM_STDOUT/$(printf %s "$*" | tr -c "a-z0-9-" _)"; }';
    const bash = (script: string) =>
      run("bash", ["-euo", "pipefail", "-c", `${wrapper}\n${script}`], {
        cwd: copy,
        env: { ...process.env, CLUSTER_STATE_DIR: stateDir, NPM_STDOUT: npmStdout },
        maxBuffer: 1 << 24,
      }).catch((error: { code?: number; stdout?: string; stderr?: string }) => {
        throw new Error(`README commands failed (exit ${error.code}):\n${error.stdout}\n${error.stderr}`);
      });

    // The suite's own real node has already set the kubelet's sysctls; this machine's values
    // (which it recorded) are put back for this test, so the kubelet here changes them again.
    const suiteNode = suiteNodeSysctls();
    writeSysctls(suiteNode.original);
    cleanups.push(async () => writeSysctls(suiteNode.current));
    const before = hostState(stateDir);

    const t0 = Date.now();
    const up = await bash(upScript);
    const upSeconds = (Date.now() - t0) / 1000;
    const kubeconfig = path.join(stateDir, "kubeconfig");
    expect(up.stdout).toMatch(/^task-timeout +Failed +TaskTimeout +migrate /m);
    expect(up.stdout).toContain("playbook.playbook.dev/hello condition met");
    // stdout of cluster:up is only the line `eval` runs; image:build's ends with the image's name.
    const printed = (args: string) => readFileSync(path.join(npmStdout, args), "utf8");
    expect(printed("run_--silent_cluster_up")).toBe(`export KUBECONFIG=${kubeconfig}\n`);
    expect(printed("run_image_build")).toMatch(/\nplaybook-controller:0\.1\.0\n$/);
    expect(up.stderr).toMatch(
      /^cluster:up: Real node real-node Ready after \d+ms \(kubelet on 127\.0\.0\.1:\d+\)$/m,
    );
    expect(up.stderr).toMatch(
      /^cluster:up: Real node real-node \(containerd .*\) has .*localhost\/playbook-controller:0\.1\.0/m,
    );

    // The summary says where the controller serves /metrics and /readyz, and it answers there.
    const metricsLine =
      /^cluster:up: Controller metrics: (http:\/\/127\.0\.0\.1:\d+)\/metrics \(health \1\/healthz, readiness \1\/readyz\)$/m.exec(
        up.stderr,
      );
    expect(metricsLine, up.stderr).not.toBeNull();
    const controllerUrl = metricsLine?.[1] ?? "";
    const metrics = await fetch(`${controllerUrl}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/^playbook_\w+/m);
    expect((await fetch(`${controllerUrl}/readyz`)).status).toBe(200);

    const state = (await readClusterState(stateDir)) as ClusterState;
    expect(state.processes.map((p) => p.name)).toEqual(
      expect.arrayContaining([
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "containerd",
        "kubelet",
        "kube-proxy",
        "controller",
      ]),
    );
    // Recorded, so the check below finds it closed after cluster:down.
    expect(state.ports["controller-metrics"]).toBe(Number(new URL(controllerUrl).port));
    const kube = { env: { ...process.env, KUBECONFIG: kubeconfig } };
    const kubectl = (...args: string[]) => run(path.join(state.binDir, "kubectl"), args, kube);
    expect((await kubectl("get", "nodes", "--no-headers")).stdout).toMatch(/^real-node\s+Ready\s/);
    const runShellPod = (name: string, ...shArgs: string[]) =>
      kubectl(
        ...["run", name, `--image=${BUSYBOX_IMAGE}`, "--image-pull-policy=Never", "--restart=Never"],
        ...["--command", "--", "sh", "-c", ...shArgs],
      );
    // A pod makes the CNI plugin create the bridge and a veth pair (and turn on forwarding).
    await runShellPod("probe", "exit 0");
    await kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/probe", "--timeout=90s");
    expect((await kubectl("get", "pod", "probe", "-o", "jsonpath={.status.podIP}")).stdout).toMatch(
      /^10\.88\./,
    );
    // A pod still running at cluster:down, found by the marker in its shell's command line.
    const tag = marker();
    await runShellPod("sleeper", `sleep 300; : ${tag}`);
    await kubectl("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=90s");
    await waitFor(
      "the sleeper's shell, by its marker",
      async () => (processesWithMarker(tag).length > 0 ? true : undefined),
      { timeoutMs: 10_000 },
    ).catch((error: Error) => {
      throw new Error(
        `${error.message}; sleep processes: ${execFileSync("sh", ["-c", "ps -eo pid,args | grep sleep"], { encoding: "utf8" })}`,
      );
    });

    const during = hostState(stateDir);
    // The pod bridge and the pods' veths are in containerd's own network namespace.
    // Podman's test containers may come and go meanwhile (veth*, podman*); any other change is ours.
    const ours = (links: string[]) => links.filter((name) => !/^(veth|podman|cni-podman)/.test(name));
    expect(ours(during.links)).toEqual(ours(before.links));
    expect(during.sysctls["net/ipv4/ip_forward"]).toBe(before.sysctls["net/ipv4/ip_forward"]);
    // The kubelet did set its sysctls (so the comparison after cluster:down means something).
    expect(during.sysctls["kernel/panic"]).toBe("10");
    expect(during.links).not.toContain(POD_BRIDGE);
    expect(during.mounts).toEqual(before.mounts);
    expect(during.iptablesChains.filter((c) => c.includes("KUBE-"))).toEqual(
      before.iptablesChains.filter((c) => c.includes("KUBE-")),
    );
    expect(during.processes.map((p) => p.split(" ")[1])).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/containerd$/),
        expect.stringMatching(/kubelet$/),
        expect.stringMatching(/kube-proxy$/),
      ]),
    );
    // No route, veth or table on this machine leads to the node: kube-proxy's tables are in the
    // node's network namespace, which is one more namespace here while it runs.
    expect(during.routes).toEqual(before.routes);
    expect(during.nftTables.filter((t) => t.includes("kube-proxy"))).toEqual([]);
    const netNamespace = nodeRecord(stateDir)?.netNamespace ?? "";
    expect(before.netNamespaces).not.toContain(netNamespace);
    expect(during.netNamespaces).toContain(netNamespace);

    const t1 = Date.now();
    const downRun = await bash(downPart);
    const downSeconds = (Date.now() - t1) / 1000;
    expect(downRun.stderr).toContain("Stopped the real node");
    expect(downRun.stderr).toContain("cluster:down: Cluster stopped");
    process.stderr.write(
      `README commands: up to cluster:down ${upSeconds.toFixed(1)}s, cluster:down ${downSeconds.toFixed(1)}s\n`,
    );

    expect(existsSync(path.join(stateDir, "state.json"))).toBe(false);
    for (const recorded of state.processes) expect(isRunning(recorded), recorded.name).toBe(false);
    for (const [name, port] of Object.entries(state.ports)) expect(await isListening(port), name).toBe(false);
    // Every control-plane process and the node name the state folder in their arguments.
    expect(processesWithMarker(stateDir)).toEqual([]);
    expect(processesWithMarker(tag)).toEqual([]);
    const after = hostState(stateDir);
    expect(after.netNamespaces).not.toContain(netNamespace);
    expect(after).toEqual({
      ...before,
      links: after.links,
      iptablesChains: after.iptablesChains,
      // Other work on this machine (podman, the suite's own node) may start or end namespaces and tables.
      nftTables: after.nftTables,
      netNamespaces: after.netNamespaces,
    });
    expect(
      after.nftTables.filter((t) => !before.nftTables.includes(t) && !/netavark|podman/.test(t)),
    ).toEqual([]);
    // Other work on this machine may add or remove devices and chains meanwhile; none is the node's.
    expect(ours(after.links)).toEqual(ours(before.links));
    expect(after.iptablesChains.filter((c) => c.includes("KUBE-"))).toEqual(
      before.iptablesChains.filter((c) => c.includes("KUBE-")),
    );
    expect(existsSync(path.join(stateDir, "real-node", "host.json"))).toBe(false);
    // Nor containerd's images and containers' files on disk; the logs stay to be read.
    expect(existsSync(path.join(stateDir, "real-node", "containerd"))).toBe(false);
    expect(existsSync(path.join(stateDir, "logs", "kubelet.log"))).toBe(true);
    writeSysctls(suiteNode.current);
  }, 900_000);
});

/** What is still running of the run in `stateDir`: pid and command line each. */
function describeProcesses(pids: (number | string)[]): string {
  return pids
    .map((pid) => {
      try {
        return `${pid} [${readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim()}]`;
      } catch {
        return `${pid} (gone)`;
      }
    })
    .join("; ");
}

describe("an interrupted real-node test run", () => {
  it.each([
    ["while its global setup starts the real node", "containerd ready", 5], // the harness's log line (real-node.ts),
    ["while its tests run pods", "Cluster ready", 6],
  ])(
    "leaves no control-plane, node or pod process, namespace or cgroup behind after SIGINT %s",
    async (_when, cue, atLeast) => {
      // A nested run of one real-node file, interrupted when its log shows the cue.
      const vitest = path.join(repoRoot(), "node_modules", "vitest", "vitest.mjs");
      const child = spawn(
        process.execPath,
        [vitest, "run", "--project", "real-node", "test/real-node/kubelet.test.ts"],
        // Its own process group, so the interrupt reaches it and its workers as Ctrl-C in a terminal does.
        {
          cwd: repoRoot(),
          stdio: ["ignore", "ignore", "pipe"],
          // Every real-node file, whichever group this run is (kubelet.test.ts is in the shared one).
          env: { ...process.env, CI: "true", PLAYBOOK_REAL_NODE: "1", PLAYBOOK_REAL_NODE_GROUP: "" },
          detached: true,
        },
      );
      const stateDir = path.join(repoRoot(), ".cluster", `test-${child.pid}-real`);
      const before = hostState(stateDir);
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      try {
        await waitFor("the nested run's cue", async () => (stderr.includes(cue) ? true : undefined), {
          timeoutMs: 180_000,
          abortIf: () => (child.exitCode !== null ? `nested vitest exited early:\n${stderr}` : undefined),
        });
        expect(processesWithMarker(stateDir).length).toBeGreaterThanOrEqual(atLeast);
        const record = nodeRecord(stateDir);
        expect(record?.netNamespace, "the node's namespaces exist").toBeDefined();
        const { cgroupRoot, netNamespace } = record ?? { cgroupRoot: "" };
        if (cue === "Cluster ready") {
          await waitFor(
            "a pod's process",
            async () => (cgroupProcesses(cgroupRoot).length > 0 ? true : undefined),
            { timeoutMs: 60_000 },
          );
        }

        process.kill(-(child.pid ?? 0), "SIGINT");
        await exited;

        await waitFor(
          "every process of the interrupted run to be gone",
          async () =>
            processesWithMarker(stateDir).length === 0 && cgroupProcesses(cgroupRoot).length === 0
              ? true
              : undefined,
          { timeoutMs: 15_000 },
        ).catch((error: Error) => {
          throw new Error(
            `${error.message}; left: ${describeProcesses([...processesWithMarker(stateDir), ...cgroupProcesses(cgroupRoot)])}`,
          );
        });
        const after = hostState(stateDir);
        expect(after.netNamespaces).not.toContain(netNamespace);
        expect(after.cgroups.filter((c) => c.endsWith(`/${cgroupRoot}`))).toEqual([]);
        expect(after.mounts).toEqual(before.mounts);
      } finally {
        try {
          process.kill(-(child.pid ?? 0), "SIGKILL");
        } catch {
          // The whole group is gone already.
        }
        await rm(stateDir, { recursive: true, force: true });
        // An interrupted run keeps its logs (log-retention.ts): this one's are not needed.
        for (const entry of readdirSync(path.dirname(stateDir)))
          if (entry.startsWith("kept-") && entry.endsWith(`-${child.pid}-real`))
            await rm(path.join(path.dirname(stateDir), entry), { recursive: true, force: true });
      }
    },
    300_000,
  );
});
