// Kueue for a test file of the shared test cluster, and the queue objects its tests make: one
// Kueue manager at a time per cluster (two would both run every ClusterQueue), so a file that
// starts one holds the cluster's Kueue lock until it stops it; its webhooks act only on
// namespaces labelled with `namespaceLabels`, so the files running beside it see no Kueue.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { ApiException, CustomObjectsApi, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { inject } from "vitest";
import {
  type ClusterQueueQuota,
  clusterQueue,
  KUEUE_GROUP,
  KUEUE_VERSION,
  type Kueue,
  localQueue,
  resourceFlavor,
  startKueue,
} from "./kueue.js";
import { waitFor } from "./processes.js";

/** The namespace label a test namespace carries for Kueue's webhooks to act on its pods. */
export const KUEUE_TEST_NAMESPACE_LABEL = "kueue-test.playbook.dev/managed";

/** A Kueue status condition (metav1.Condition). */
export interface KueueCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

/** What the tests read of a Workload. */
export interface Workload {
  metadata: {
    name: string;
    namespace: string;
    uid?: string;
    labels?: Record<string, string>;
    ownerReferences?: { kind: string; name: string; uid: string }[];
    deletionTimestamp?: string;
  };
  spec?: { queueName?: string; priority?: number; priorityClassRef?: unknown; active?: boolean };
  status?: {
    conditions?: KueueCondition[];
    admission?: { clusterQueue?: string };
    requeueState?: unknown;
  };
}

export interface TestKueue {
  kueue: Kueue;
  /** Labels for createTestNamespace: Kueue's webhooks act on pods in namespaces that carry them. */
  namespaceLabels: Record<string, string>;
  custom: CustomObjectsApi;
  /** A ResourceFlavor named `prefix-<random>`; deleted by stop(). Returns its name. */
  createResourceFlavor(prefix?: string): Promise<string>;
  /** A ClusterQueue for every namespace with a cpu and memory quota, once Kueue reports it Active. */
  createClusterQueue(quota: ClusterQueueQuota, prefix?: string): Promise<string>;
  /** A LocalQueue in `namespace` pointing at `clusterQueue`, once Kueue reports it Active. */
  createLocalQueue(namespace: string, name: string, clusterQueue: string): Promise<string>;
  /** A WorkloadPriorityClass (pods name it with the kueue.x-k8s.io/priority-class label). */
  createWorkloadPriorityClass(value: number, prefix?: string): Promise<string>;
  /** Deletes the cluster-scoped objects made here, stops Kueue and releases the cluster's Kueue lock. */
  stop(): Promise<void>;
}

export interface TestKueueOptions {
  /** Fields of Kueue's Configuration set over the harness's (waitForPodsReady...). */
  settings?: Record<string, unknown>;
  log?: (message: string) => void;
}

/**
 * The cluster's Kueue lock: util-linux flock holds it for as long as its `cat` child reads the
 * pipe this process holds open, so it is released when stop() closes the pipe or this process dies.
 */
async function takeKueueLock(file: string, log: (message: string) => void): Promise<() => Promise<void>> {
  const holder = spawn("flock", ["-o", file, "sh", "-c", "echo locked; exec cat >/dev/null"], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const waiting = setTimeout(() => log(`waiting for another test file's Kueue to stop (${file})`), 2_000);
  try {
    await new Promise<void>((resolve, reject) => {
      holder.stdout.once("data", () => resolve());
      holder.once("error", reject);
      holder.once("exit", (code) => reject(new Error(`flock ${file} exited with code ${code}`)));
    });
  } finally {
    clearTimeout(waiting);
  }
  return async () => {
    const exited = new Promise((resolve) => holder.once("exit", resolve));
    holder.stdin.end();
    await exited;
  };
}

/**
 * Starts Kueue beside the test cluster the global setup started (inject: kubeconfig, binDir);
 * its log is the cluster's logs/kueue.log, kept with the cluster's logs when a test fails.
 */
export async function startTestKueue(options: TestKueueOptions = {}): Promise<TestKueue> {
  const log = options.log ?? ((message: string) => process.stderr.write(`[kueue] ${message}\n`));
  const kubeconfig = inject("kubeconfig");
  // The cluster's state folder holds its kubeconfig (control-plane.ts).
  const stateDir = path.dirname(kubeconfig);
  const release = await takeKueueLock(path.join(stateDir, "kueue.lock"), log);
  const namespaceLabels = { [KUEUE_TEST_NAMESPACE_LABEL]: "true" };
  let kueue: Kueue;
  try {
    kueue = await startKueue({
      binDir: inject("binDir"),
      kubeconfig,
      stateDir,
      log,
      workloadNamespaceSelector: { matchLabels: namespaceLabels },
      ...(options.settings ? { settings: options.settings } : {}),
    });
  } catch (error) {
    await release();
    throw error;
  }
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(kubeconfig);
  const custom = kubeConfig.makeApiClient(CustomObjectsApi);
  const made: { plural: string; name: string }[] = [];
  const suffix = () => randomBytes(3).toString("hex");
  const createClusterScoped = async (plural: string, body: Record<string, unknown>, name: string) => {
    await custom.createClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_VERSION, plural, body });
    made.push({ plural, name });
    return name;
  };
  const waitActive = async (what: string, read: () => Promise<unknown>) =>
    waitFor(
      `${what} to be Active`,
      async () => (conditionOf((await read()) as Workload, "Active")?.status === "True" ? true : undefined),
      { timeoutMs: 30_000, intervalMs: 100 },
    );
  return {
    kueue,
    namespaceLabels,
    custom,
    async createResourceFlavor(prefix = "flavor") {
      const name = `${prefix}-${suffix()}`;
      return createClusterScoped("resourceflavors", resourceFlavor(name), name);
    },
    async createClusterQueue(quota, prefix = "cq") {
      const name = `${prefix}-${suffix()}`;
      await createClusterScoped("clusterqueues", clusterQueue(name, quota), name);
      await waitActive(`ClusterQueue ${name}`, () =>
        custom.getClusterCustomObject({
          group: KUEUE_GROUP,
          version: KUEUE_VERSION,
          plural: "clusterqueues",
          name,
        }),
      );
      return name;
    },
    async createLocalQueue(namespace, name, clusterQueueName) {
      await custom.createNamespacedCustomObject({
        group: KUEUE_GROUP,
        version: KUEUE_VERSION,
        namespace,
        plural: "localqueues",
        body: localQueue(name, namespace, clusterQueueName),
      });
      await waitActive(`LocalQueue ${namespace}/${name}`, () =>
        custom.getNamespacedCustomObject({
          group: KUEUE_GROUP,
          version: KUEUE_VERSION,
          namespace,
          plural: "localqueues",
          name,
        }),
      );
      return name;
    },
    async createWorkloadPriorityClass(value, prefix = "priority") {
      const name = `${prefix}-${suffix()}`;
      return createClusterScoped(
        "workloadpriorityclasses",
        {
          apiVersion: `${KUEUE_GROUP}/${KUEUE_VERSION}`,
          kind: "WorkloadPriorityClass",
          metadata: { name },
          value,
        },
        name,
      );
    },
    async stop() {
      try {
        // While Kueue runs: it holds a ClusterQueue and a ResourceFlavor in use with a finalizer.
        for (const { plural, name } of made.reverse())
          await custom
            .deleteClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_VERSION, plural, name })
            .catch((error) => log(`could not delete ${plural}/${name}: ${error}`));
        await kueue.stop();
      } finally {
        await release();
      }
    },
  };
}

export function conditionOf(
  object: { status?: { conditions?: KueueCondition[] } } | undefined,
  type: string,
): KueueCondition | undefined {
  return object?.status?.conditions?.find((condition) => condition.type === type);
}

/** The Workload Kueue made for a plain pod: the one whose owner reference is the pod's uid. */
export async function workloadOfPod(custom: CustomObjectsApi, pod: V1Pod): Promise<Workload | undefined> {
  const namespace = pod.metadata?.namespace ?? "";
  const uid = pod.metadata?.uid;
  const list = (await custom.listNamespacedCustomObject({
    group: KUEUE_GROUP,
    version: KUEUE_VERSION,
    namespace,
    plural: "workloads",
  })) as { items: Workload[] };
  return list.items.find((workload) => workload.metadata.ownerReferences?.some((owner) => owner.uid === uid));
}

/** Waits until the pod's Workload exists and `predicate` holds for it. */
export async function waitForWorkloadOfPod(
  custom: CustomObjectsApi,
  pod: V1Pod,
  what: string,
  predicate: (workload: Workload) => boolean = () => true,
  timeoutMs = 30_000,
): Promise<Workload> {
  return waitFor(
    `the Workload of pod ${pod.metadata?.namespace}/${pod.metadata?.name} ${what}`,
    async () => {
      const workload = await workloadOfPod(custom, pod);
      return workload && predicate(workload) ? workload : undefined;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

export function isKueueNotFound(error: unknown): boolean {
  return error instanceof ApiException && error.code === 404;
}
