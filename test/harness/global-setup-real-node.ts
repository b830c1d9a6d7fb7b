// The real-node project's cluster: containerd and a real kubelet instead of the scripted node.
import type { TestProject } from "vitest/node";
import { setupCluster } from "./global-setup.js";

export default async function setup(project: TestProject) {
  return setupCluster(project, "real");
}
