import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { ApiException, CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { inject } from "vitest";
import { waitFor } from "./processes.js";

const run = promisify(execFile);

export interface ClusterClients {
  kubeConfig: KubeConfig;
  core: CoreV1Api;
}

/** Clients for the control plane the global setup started. */
export function clusterClients(): ClusterClients {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(inject("kubeconfig"));
  return { kubeConfig, core: kubeConfig.makeApiClient(CoreV1Api) };
}

/** A fresh namespace, returned once its default service account exists (pods need it). */
export async function createTestNamespace(
  core: CoreV1Api,
  prefix: string,
  labels: Record<string, string> = {},
): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString("hex")}`;
  await core.createNamespace({ body: { metadata: { name, labels } } });
  await waitFor(
    `service account default in ${name}`,
    async () => {
      await core.readNamespacedServiceAccount({ namespace: name, name: "default" });
      return true;
    },
    { timeoutMs: 30_000 },
  );
  return name;
}

export async function deleteTestNamespace(core: CoreV1Api, name: string): Promise<void> {
  await core.deleteNamespace({ name }).catch(() => {});
}

export function isNotFound(error: unknown): boolean {
  return error instanceof ApiException && error.code === 404;
}

export async function waitForPod(
  core: CoreV1Api,
  namespace: string,
  name: string,
  what: string,
  predicate: (pod: V1Pod) => boolean,
  timeoutMs = 60_000,
): Promise<V1Pod> {
  return waitFor(
    `pod ${namespace}/${name} ${what}`,
    async () => {
      const pod = await core.readNamespacedPod({ namespace, name });
      return predicate(pod) ? pod : undefined;
    },
    { timeoutMs, intervalMs: 200 },
  );
}

export async function waitForPodGone(core: CoreV1Api, namespace: string, name: string, timeoutMs = 60_000) {
  await waitFor(
    `pod ${namespace}/${name} to be deleted`,
    async () => {
      try {
        await core.readNamespacedPod({ namespace, name });
        return undefined;
      } catch (error) {
        if (isNotFound(error)) return true;
        throw error;
      }
    },
    { timeoutMs, intervalMs: 100 },
  );
}

/**
 * Loses the pod as a node failure would: taken from the API as PodGC does it for a node that no
 * longer exists (Failed with DisruptionTarget, then force-deleted); a real kubelet kills its
 * containers when it sees the deletion.
 */
export async function losePod(namespace: string, name: string): Promise<void> {
  await loseToPodGc(namespace, name);
}

export { processesWithMarker, processesWorkingUnder } from "../support/processes.js";

export const marker = (): string => `marker-${randomBytes(6).toString("hex")}`;

export { sleep };

async function loseToPodGc(namespace: string, name: string): Promise<void> {
  const kubectl = (args: string[]) =>
    run(path.join(inject("binDir"), "kubectl"), [
      `--kubeconfig=${inject("kubeconfig")}`,
      "-n",
      namespace,
      ...args,
    ]);
  const now = new Date().toISOString();
  await kubectl([
    ...["patch", "pod", name, "--subresource=status", "--type=strategic", "-p"],
    JSON.stringify({
      status: {
        phase: "Failed",
        conditions: [
          {
            type: "DisruptionTarget",
            status: "True",
            reason: "DeletionByPodGC",
            message: "PodGC: node no longer exists",
            lastTransitionTime: now,
          },
        ],
      },
    }),
  ]);
  await kubectl(["delete", "pod", name, "--grace-period=0", "--force", "--wait=false"]);
}
