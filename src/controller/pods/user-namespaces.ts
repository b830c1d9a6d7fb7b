// Whether run pods get their own user namespace (`hostUsers: false`, docs/design.md "The pod's
// user namespace"): a task that escapes its container lands as an unmapped user on the node. The
// cluster supports it when the API server is 1.33+ (user namespaces on by default) and every node's
// runtime qualifies: containerd 2.0+ or CRI-O 1.25+ (from `status.nodeInfo.containerRuntimeVersion`),
// with an OCI runtime that does idmapped mounts (runc 1.2+, crun 1.9+). The OCI runtime's version
// is not in the node's status; what it can do is: the kubelet reports, per runtime handler, whether
// the runtime supports user namespaces (`status.runtimeHandlers[].features.userNamespaces`), which
// containerd works out from the OCI runtime's `features` (user namespaces and idmapped mounts).
// `--user-namespaces auto` decides from these, again as nodes change. Pure: the controller passes
// what it observed.
import { type MajorMinor, runtimeAtLeast, serverAtLeast } from "./runtime-versions.js";

export const USER_NAMESPACES_SETTINGS = ["auto", "on", "off"] as const;
export type UserNamespacesSetting = (typeof USER_NAMESPACES_SETTINGS)[number];

/** A node as `auto` reads it. */
export interface UserNamespacesNode {
  name: string;
  /** `status.nodeInfo.containerRuntimeVersion`, e.g. `containerd://2.4.2`. */
  runtime: string;
  /**
   * The default runtime handler's `features.userNamespaces` (`status.runtimeHandlers[]` with the
   * name ""); undefined when the kubelet does not report it.
   */
  userNamespaces: boolean | undefined;
}

export interface UserNamespacesCluster {
  /** The API server's gitVersion, e.g. `v1.36.5`; undefined until it answered. */
  serverVersion: string | undefined;
  nodes: readonly UserNamespacesNode[];
}

export interface UserNamespacesChoice {
  /** true: pods are created with `hostUsers: false`. */
  enabled: boolean;
  /** Why, in words, for the controller's log. */
  why: string;
}

/** The first version of each container runtime that creates pods in user namespaces. */
const USER_NAMESPACE_RUNTIMES: Record<string, MajorMinor> = {
  containerd: [2, 0],
  "cri-o": [1, 25],
};
const USER_NAMESPACE_SERVER: MajorMinor = [1, 33];

/** Why a node cannot run pods in user namespaces; undefined when it can. */
export function userNamespacesProblem(node: UserNamespacesNode): string | undefined {
  if (!runtimeAtLeast(node.runtime, USER_NAMESPACE_RUNTIMES)) {
    return `runs ${node.runtime || "an unreported runtime"} (user namespaces need containerd 2.0+ or CRI-O 1.25+)`;
  }
  if (node.userNamespaces === undefined) {
    return "does not report whether its runtime supports user namespaces (status.runtimeHandlers)";
  }
  if (!node.userNamespaces) {
    return `runs ${node.runtime} with an OCI runtime without user namespaces and idmapped mounts (runc 1.2+ or crun 1.9+ needed; status.runtimeHandlers[].features.userNamespaces is false)`;
  }
  return undefined;
}

/** Whether the pods created now get `hostUsers: false`. */
export function chooseUserNamespaces(
  setting: UserNamespacesSetting,
  cluster: UserNamespacesCluster,
): UserNamespacesChoice {
  if (setting !== "auto") return { enabled: setting === "on", why: `--user-namespaces ${setting}` };
  const server = cluster.serverVersion;
  if (!serverAtLeast(server, USER_NAMESPACE_SERVER)) {
    return {
      enabled: false,
      why: `auto: the API server is ${server ?? "of an unknown version"}, user namespaces need Kubernetes 1.33+`,
    };
  }
  if (cluster.nodes.length === 0) {
    return { enabled: false, why: "auto: no node has reported its container runtime yet" };
  }
  for (const node of cluster.nodes) {
    const problem = userNamespacesProblem(node);
    if (problem) return { enabled: false, why: `auto: node ${node.name} ${problem}` };
  }
  const runtimes = [...new Set(cluster.nodes.map((node) => node.runtime))].sort();
  return {
    enabled: true,
    why: `auto: the API server is ${server} and every node's runtime supports user namespaces (${runtimes.join(", ")})`,
  };
}
