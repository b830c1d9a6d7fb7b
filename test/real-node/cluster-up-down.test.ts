// `npm run cluster:up -- --node real` then `npm run cluster:down`, as a developer runs them, on a
// cluster of its own: this machine's processes, mounts, network devices, routes, iptables chains,
// nftables tables, network namespaces, kernel settings and cgroups are listed before and after,
// and nothing of the real node is left.
import { execFile, execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, inject, it } from "vitest";
import { z } from "zod";
import { repoRoot } from "../harness/binaries.js";
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

const stateDirs: string[] = [];
afterAll(async () => {
  for (const dir of stateDirs) {
    await run(process.execPath, [path.join(repoRoot(), "dist", "scripts", "cluster-down.js")], {
      env: { ...process.env, CLUSTER_STATE_DIR: dir },
    }).catch(() => {});
    await rm(dir, { recursive: true, force: true });
  }
});

describe("cluster:up --node real and cluster:down", () => {
  it("join a Ready real node that changes nothing on this machine, and leave nothing behind", async () => {
    const stateDir = await mkdtemp(path.join(repoRoot(), ".cluster", "rn-updown-"));
    stateDirs.push(stateDir);
    const env = { ...process.env, CLUSTER_STATE_DIR: stateDir };
    // The suite's own real node has already set the kubelet's sysctls; this machine's values
    // (which it recorded) are put back for this test, so the kubelet here changes them again.
    const suiteNode = suiteNodeSysctls();
    writeSysctls(suiteNode.original);
    const before = hostState(stateDir);

    const up = await run(
      process.execPath,
      [path.join(repoRoot(), "dist", "scripts", "cluster-up.js"), "--node", "real", "--no-controller"],
      { env },
    );
    expect(up.stdout).toBe(`export KUBECONFIG=${path.join(stateDir, "kubeconfig")}\n`);
    expect(up.stderr).toMatch(/Real node real-node Ready after \d+ms \(kubelet on 127\.0\.0\.1:\d+\)/);
    const kubectl = path.join(
      JSON.parse(readFileSync(path.join(stateDir, "state.json"), "utf8")).binDir as string,
      "kubectl",
    );
    const { stdout: nodes } = await run(kubectl, ["get", "nodes", "--no-headers"], {
      env: { ...env, KUBECONFIG: path.join(stateDir, "kubeconfig") },
    });
    expect(nodes).toMatch(/^real-node\s+Ready\s/);
    // A pod makes the CNI plugin create the bridge and a veth pair (and turn on forwarding).
    const kube = { env: { ...env, KUBECONFIG: path.join(stateDir, "kubeconfig") } };
    await run(
      kubectl,
      [
        ...["run", "probe", `--image=${BUSYBOX_IMAGE}`, "--image-pull-policy=Never", "--restart=Never"],
        ...[
          "--",
          "sh",
          "-c",
          "ip -o -4 addr show eth0 2>/dev/null || cat /proc/net/fib_trie | grep -c 10.88",
        ],
      ],
      kube,
    );
    await run(
      kubectl,
      ["wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/probe", "--timeout=90s"],
      kube,
    );
    const { stdout: podIP } = await run(
      kubectl,
      ["get", "pod", "probe", "-o", "jsonpath={.status.podIP}"],
      kube,
    );
    expect(podIP).toMatch(/^10\.88\./);

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
    const { netNamespace } = z
      .object({ netNamespace: z.string() })
      .parse(JSON.parse(readFileSync(path.join(stateDir, "real-node", "host.json"), "utf8")));
    expect(before.netNamespaces).not.toContain(netNamespace);
    expect(during.netNamespaces).toContain(netNamespace);

    const down = await run(process.execPath, [path.join(repoRoot(), "dist", "scripts", "cluster-down.js")], {
      env,
    });
    expect(down.stderr).toContain("Stopped the real node");
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
    writeSysctls(suiteNode.current);
  });
});
