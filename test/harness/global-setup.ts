import path from "node:path";
// Brings in vitest's types so the ProvidedContext augmentation below applies.
import type {} from "vitest";
import type { TestProject } from "vitest/node";
import { repoRoot } from "./binaries.js";
import { killRecordedProcessesSync } from "./control-plane.js";
import {
  type DevCluster,
  killRealNodeProcessesSync,
  type NodeKind,
  startDevCluster,
  sweepAbandonedTestClusters,
} from "./dev-cluster.js";
import { keepOrRemoveClusterState, type RunOutcome, whyKeepLogs } from "./log-retention.js";
import { projectImageName } from "./real-node/images.js";
import { importTaskImages } from "./task-images.js";

declare module "vitest" {
  export interface ProvidedContext {
    kubeconfig: string;
    binDir: string;
    /**
     * Which node the pods go to: the scripted node (the cluster project: its tests write pod
     * status), or containerd with a real kubelet (the real-node project).
     */
    nodeKind: NodeKind;
    /** The image the test controllers give their pods: the project's image on a real node. */
    runnerImage: string;
  }
}

/** The image the cluster tests' controllers name in their pods: no node pulls it on the scripted node. */
const SCRIPTED_NODE_RUNNER_IMAGE = "ghcr.io/playbook-controller/playbook-controller:test";

const log = (message: string): void => {
  process.stderr.write(`[cluster] ${message}\n`);
};

/** What vitest knows of this project's test files and of errors outside tests, at teardown. */
function outcomeOf(project: TestProject): RunOutcome {
  const state = project.vitest.state;
  const modules = state.getTestModules().filter((module) => module.project.name === project.name);
  return {
    failedFiles: modules.filter((module) => !module.ok()).length,
    unhandledErrors: state.getUnhandledErrors().length,
  };
}

/**
 * One control plane and node for every cluster test file; each test works in its own
 * namespace. Stopped in teardown, on SIGINT/SIGTERM, and (forcefully) on exit.
 */
export default async function setup(project: TestProject) {
  return setupCluster(project, "scripted");
}

/** The cluster setup for a node kind; test/harness/global-setup-real-node.ts asks for a real one. */
export async function setupCluster(project: TestProject, node: NodeKind) {
  const parent = path.join(repoRoot(), ".cluster");
  await sweepAbandonedTestClusters(parent, log);
  // The cluster and real-node projects may both run in one vitest process: one folder each.
  const stateDir = path.join(parent, node === "real" ? `test-${process.pid}-real` : `test-${process.pid}`);

  // Hooks go in before anything starts, so an interrupt during startup leaves nothing behind:
  // every process is in state.json as soon as it is spawned.
  let cluster: DevCluster | undefined;
  let stopping: Promise<void> | undefined;
  // The state folder and its logs go only when every test of the project passed (log-retention.ts).
  const stopOnce = async (outcome: () => RunOutcome): Promise<void> => {
    try {
      if (cluster) await cluster.stop();
      else {
        // Interrupted while starting: a real node's pods, cgroups and sysctls go too, before the
        // state folder (which records them) is kept or removed.
        killRecordedProcessesSync(stateDir);
        killRealNodeProcessesSync(stateDir);
      }
      log("Cluster stopped");
    } finally {
      await keepOrRemoveClusterState(stateDir, whyKeepLogs(outcome()), log);
    }
  };
  const teardown = (outcome: () => RunOutcome): Promise<void> => {
    stopping ??= stopOnce(outcome);
    return stopping;
  };
  const onSignal = (signal: NodeJS.Signals) => {
    void teardown(() => ({ interrupted: true, failedFiles: 0, unhandledErrors: 0 })).finally(() =>
      process.exit(signal === "SIGINT" ? 130 : 143),
    );
  };
  // If the process dies before teardown finishes, no child may outlive it.
  const onExit = () => {
    killRealNodeProcessesSync(stateDir);
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
    cluster = await startDevCluster({ stateDir, daemon: false, log, node });
  } catch (error) {
    unhook();
    // startDevCluster stopped what it had started; its logs say why it failed.
    await keepOrRemoveClusterState(stateDir, "the cluster's setup failed", log).catch(() => {});
    throw error;
  }
  log(`Cluster ready in ${Date.now() - t0}ms (${cluster.state.server})`);
  // The task images go in once, here: the suites that use them may run side by side
  // (PLAYBOOK_REAL_NODE_GROUP=shared) and would otherwise build and import them at once. The
  // exclusive group's files use none.
  if (node === "real" && process.env.PLAYBOOK_REAL_NODE_GROUP !== "exclusive") {
    try {
      await importTaskImages(cluster.state.kubeconfig, log);
    } catch (error) {
      await teardown(() => ({ setupFailed: true, failedFiles: 0, unhandledErrors: 0 }));
      unhook();
      throw error;
    }
  }
  project.provide("kubeconfig", cluster.state.kubeconfig);
  project.provide("binDir", cluster.state.binDir);
  project.provide("nodeKind", cluster.nodeKind);
  project.provide("runnerImage", node === "real" ? projectImageName() : SCRIPTED_NODE_RUNNER_IMAGE);

  return async () => {
    await teardown(() => outcomeOf(project));
    unhook();
  };
}
