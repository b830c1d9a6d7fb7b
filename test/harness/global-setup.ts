import { rm } from "node:fs/promises";
import path from "node:path";
// Brings in vitest's types so the ProvidedContext augmentation below applies.
import type {} from "vitest";
import type { TestProject } from "vitest/node";
import { repoRoot } from "./binaries.js";
import { killRecordedProcessesSync } from "./control-plane.js";
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

  // Hooks go in before anything starts, so an interrupt during startup leaves nothing behind:
  // every process is in state.json as soon as it is spawned.
  let cluster: DevCluster | undefined;
  let stopping: Promise<void> | undefined;
  const stopOnce = async (): Promise<void> => {
    if (cluster) await cluster.stop();
    else killRecordedProcessesSync(stateDir);
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
    cluster?.node?.killAllSync();
    killRecordedProcessesSync(stateDir);
  };
  const unhook = () => {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    process.off("exit", onExit);
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  process.once("exit", onExit);

  const t0 = Date.now();
  try {
    cluster = await startDevCluster({ stateDir, daemon: false, log });
  } catch (error) {
    unhook();
    throw error;
  }
  log(`Cluster ready in ${Date.now() - t0}ms (${cluster.state.server})`);
  project.provide("kubeconfig", cluster.state.kubeconfig);
  project.provide("processNodeUrl", cluster.processNodeUrl);
  project.provide("binDir", cluster.state.binDir);

  return async () => {
    await teardown();
    unhook();
  };
}
