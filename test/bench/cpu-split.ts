// A real node's CPU apart from the control plane's, on one machine: the node's own processes
// (the kubelet, containerd, kube-proxy, and through containerd every shim) get the last CPU; the
// API server, etcd, the controllers, the object store, the relays standing in for the network and
// the bench itself get the others. On a cluster they are different machines, and what a task
// pays is what its node pays. sched_setaffinity (taskset) is inherited by the threads and
// processes each one starts later, but not by the pods: runc resets a container's affinity to its
// cgroup's cpuset, so the pods are confined by their cgroups (confineRealNodePods).
import { execFileSync } from "node:child_process";
import os from "node:os";

/** The processes that are the node's; every other one is the control plane's. */
const NODE_PROCESSES = new Set(["containerd", "kubelet", "kube-proxy"]);

export interface CpuSplit {
  node: string;
  controlPlane: string;
}

/** Pins each process (all its threads); undefined on a machine of one CPU, where nothing is split. */
export function splitCpus(
  processes: { name: string; pid: number }[],
  others: number[],
): CpuSplit | undefined {
  const cpus = os.availableParallelism();
  if (cpus < 2) return undefined;
  const split = { node: String(cpus - 1), controlPlane: cpus === 2 ? "0" : `0-${cpus - 2}` };
  const pin = (pid: number, list: string) =>
    execFileSync("taskset", ["-a", "-p", "-c", list, String(pid)], { stdio: "ignore" });
  for (const { name, pid } of processes) pin(pid, NODE_PROCESSES.has(name) ? split.node : split.controlPlane);
  for (const pid of others) pin(pid, split.controlPlane);
  return split;
}
