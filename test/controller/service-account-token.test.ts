// The service account's token reaches the task containers only (issue 33 item 3), as the API
// server stores the pod the controller created (its ServiceAccount admission runs here): the pod
// says automountServiceAccountToken: false, the runner container mounts nothing at the token's
// path, each task container mounts the pod's projected token volume, and an account that says
// automountServiceAccountToken: false gets a pod without it. The pods are bound to the scripted
// node (no kubelet runs them); test/real-node/service-account-token.test.ts reads the files.
import type { V1Container, V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";
import { clients, createPlaybook, podsOf, type RunningController, startController } from "./support.js";

const TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";
const { core } = clients();
let namespace = "";
let controller: RunningController | undefined;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-sa-token");
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: "deployer" } } });
  await core.createNamespacedServiceAccount({
    namespace,
    body: { metadata: { name: "quiet" }, automountServiceAccountToken: false },
  });
  controller = startController([namespace], {
    allowedServiceAccounts: "deployer,quiet",
    allowedImages: "registry.example/other:1",
  });
});
afterAll(async () => {
  await controller?.stop();
  if (namespace) await deleteTestNamespace(core, namespace);
});

async function createdPod(name: string, spec: Record<string, unknown>): Promise<V1Pod> {
  await createPlaybook(namespace, name, {
    ceiling: "5m",
    tasks: [
      { name: "build", run: "true" },
      { name: "other", run: "true", image: "registry.example/other:1" },
    ],
    ...spec,
  });
  return waitFor(`pod of playbook ${namespace}/${name}`, async () => (await podsOf(namespace, name))[0], {
    timeoutMs: 30_000,
    intervalMs: 200,
  });
}

const tokenMounts = (c: V1Container) =>
  (c.volumeMounts ?? []).filter((m) => m.mountPath.startsWith("/var/run/secrets"));

describe("a Playbook with a service account, as the API server stores its pod", () => {
  it("mounts the account's token read-only in each task container and none in the runner's", async () => {
    const pod = await createdPod("tokened", { serviceAccountName: "deployer" });
    expect(pod.spec?.serviceAccountName).toBe("deployer");
    expect(pod.spec?.automountServiceAccountToken).toBe(false);
    const containers = pod.spec?.containers ?? [];
    expect(containers.map((c) => [c.name, tokenMounts(c)])).toEqual([
      ["runner", []],
      ["task-1", [{ name: "serviceaccount-token", mountPath: TOKEN_DIR, readOnly: true }]],
      ["task-2", [{ name: "serviceaccount-token", mountPath: TOKEN_DIR, readOnly: true }]],
    ]);
    // Admission added no kube-api-access-* volume of its own.
    const volumes = (pod.spec?.volumes ?? []).filter((v) => v.projected);
    expect(volumes.map((v) => v.name)).toEqual(["serviceaccount-token"]);
    expect(
      volumes[0]?.projected?.sources?.map((s) => Object.keys(s).filter((k) => s[k as keyof typeof s])),
    ).toEqual([["serviceAccountToken"], ["configMap"], ["downwardAPI"]]);
  });

  it("mounts no token anywhere when the account says automountServiceAccountToken: false", async () => {
    const pod = await createdPod("quiet", { serviceAccountName: "quiet" });
    expect(pod.spec?.serviceAccountName).toBe("quiet");
    expect(pod.spec?.automountServiceAccountToken).toBe(false);
    expect((pod.spec?.containers ?? []).map((c) => [c.name, tokenMounts(c)])).toEqual([
      ["runner", []],
      ["task-1", []],
      ["task-2", []],
    ]);
    expect((pod.spec?.volumes ?? []).filter((v) => v.projected)).toEqual([]);
  });

  it("mounts no token anywhere without a service account", async () => {
    const pod = await createdPod("plain", {});
    expect(pod.spec?.automountServiceAccountToken).toBe(false);
    expect((pod.spec?.containers ?? []).flatMap(tokenMounts)).toEqual([]);
  });
});
