// How the agent reaches the task containers (docs/design.md, "Tasks in their own images"): the
// runner's image mounted read-only as an `image` volume where the cluster has them (Kubernetes
// 1.35+ with containerd 2.1+ or CRI-O 1.31+ on every node), else placed on a shared emptyDir by
// the runner container's postStart hook. `--agent-delivery auto` decides from the API server's
// version and every node's `status.nodeInfo.containerRuntimeVersion`, again as nodes change; a
// pod is built for one of them, never both. Pure: the controller passes what it observed.
import { type MajorMinor, runtimeAtLeast, serverAtLeast } from "./runtime-versions.js";

export const AGENT_DELIVERY_SETTINGS = ["auto", "image-volume", "post-start"] as const;
export type AgentDeliverySetting = (typeof AGENT_DELIVERY_SETTINGS)[number];
export type AgentDelivery = Exclude<AgentDeliverySetting, "auto">;

/** What `auto` decides from. */
export interface ClusterRuntimes {
  /** The API server's gitVersion, e.g. `v1.36.5`; undefined until it answered. */
  serverVersion: string | undefined;
  /** Every node's name and container runtime, e.g. `containerd://2.4.2`. */
  nodes: readonly { name: string; runtime: string }[];
}

export interface DeliveryChoice {
  delivery: AgentDelivery;
  /** Why, in words, for the controller's log. */
  why: string;
}

/** The first version of each runtime that mounts image volumes. */
const IMAGE_VOLUME_RUNTIMES: Record<string, MajorMinor> = {
  containerd: [2, 1],
  "cri-o": [1, 31],
};
const IMAGE_VOLUME_SERVER: MajorMinor = [1, 35];

/** Why a node's runtime cannot mount image volumes; undefined when it can. */
export function runtimeProblem(runtime: string): string | undefined {
  if (runtimeAtLeast(runtime, IMAGE_VOLUME_RUNTIMES)) return undefined;
  return `runs ${runtime || "an unreported runtime"} (image volumes need containerd 2.1+ or CRI-O 1.31+)`;
}

/** The delivery for the pods created now. */
export function chooseAgentDelivery(setting: AgentDeliverySetting, cluster: ClusterRuntimes): DeliveryChoice {
  if (setting !== "auto") return { delivery: setting, why: `--agent-delivery ${setting}` };
  const server = cluster.serverVersion;
  if (!serverAtLeast(server, IMAGE_VOLUME_SERVER)) {
    return {
      delivery: "post-start",
      why: `auto: the API server is ${server ?? "of an unknown version"}, image volumes need Kubernetes 1.35+`,
    };
  }
  if (cluster.nodes.length === 0) {
    return { delivery: "post-start", why: "auto: no node has reported its container runtime yet" };
  }
  for (const node of cluster.nodes) {
    const problem = runtimeProblem(node.runtime);
    if (problem) return { delivery: "post-start", why: `auto: node ${node.name} ${problem}` };
  }
  const runtimes = [...new Set(cluster.nodes.map((node) => node.runtime))].sort();
  return {
    delivery: "image-volume",
    why: `auto: the API server is ${server} and every node's runtime mounts image volumes (${runtimes.join(", ")})`,
  };
}
