import { rm } from "node:fs/promises";
import path from "node:path";
import type {} from "vitest";
import type { TestProject } from "vitest/node";
import { repoRoot } from "./binaries.js";
import { type DevCluster, startDevCluster, sweepAbandonedTestClusters } from "./dev-cluster.js";

declare module "vitest" {
  export interface ProvidedContext {
    kubeconfig: string;
    processNodeUrl: string;
    binDir: string;
  }
}

const log = (message: string): void => {
  process.stderr.write(`[cluster] ${message}\n`);
};

/**
 * One control plane and process node for every cluster test file; each test works in its own
 * namespace. Stopped in teardown, on SIGINT/SIGTERM, and (forcefully) on exit.
 */
export default async function setup(project: TestProject) {
  const parent = path.join(repoRoot(), ".cluster");
  await sweepAbandonedTestClusters(parent, log);
  const stateDir = path.join(parent, `test-${process.pid}`);
  const t0 = Date.now();
  const cluster: DevCluster = await startDevCluster({ stateDir, daemon: false, log });
  log(`Cluster ready in ${Date.now() - t0}ms (${cluster.state.server})`);
  project.provide("kubeconfig", cluster.state.kubeconfig);
  project.provide("processNodeUrl", cluster.processNodeUrl);
  project.provide("binDir", cluster.state.binDir);

  let stopping: Promise<void> | undefined;
  const stopOnce = async (): Promise<void> => {
    await cluster.stop();
    await rm(stateDir, { recursive: true, force: true });
    log("Cluster stopped");
  };
  const teardown = (): Promise<void> => {
    stopping ??= stopOnce();
    return stopping;
  };
  const onSignal = (signal: NodeJS.Signals) => {
    void teardown().finally(() => process.exit(signal === "SIGINT" ? 130 : 143));
  };
  // If the process dies before teardown finishes, no child may outlive it.
  const onExit = () => {
    cluster.node?.killAllSync();
    for (const recorded of cluster.state.processes) {
      try {
        process.kill(-recorded.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  process.once("exit", onExit);

  return async () => {
    await teardown();
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    process.off("exit", onExit);
  };
}
