// The whole user path of the Helm chart on the dev cluster: `helm install`, the controller's pods run
// by the process node (this checkout's `playbook controller`, in-cluster, as the chart's
// ServiceAccount), a leader elected, Playbooks applied afterwards run and say which limit fired,
// `helm upgrade` rolls the Deployment, `helm uninstall` leaves the CRD and the Playbooks. The
// ServiceAccount's permissions are exactly the documented list.
// The process node starts the chart's image as the image would (its entrypoint, `tini --
// playbook`, mapped to this checkout's `playbook`, with the chart's args), but runs this checkout's
// build whatever the image holds: test/image/chart-fit.test.ts checks the chart against the built
// image, and test/real-node/install.test.ts installs the chart from a registry on the real kubelet.
import path from "node:path";
import { AppsV1Api, CoordinationV1Api } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";
import { condition, helm, kubectl, kubectlResult, waitForFinished } from "./support.js";

const chart = path.join(repoRoot(), "charts", "playbook-controller");
const release = "pbc";
const fullname = "pbc-playbook-controller";
const CRDS = ["playbooks.playbook.dev", "playbookpolicies.playbook.dev"];

const { core, kubeConfig } = clusterClients();
const apps = kubeConfig.makeApiClient(AppsV1Api);
const coordination = kubeConfig.makeApiClient(CoordinationV1Api);
let system: string;
let work: string;
let installed = false;

async function controllerPods(): Promise<string[]> {
  const pods = await core.listNamespacedPod({
    namespace: system,
    labelSelector: `app.kubernetes.io/instance=${release},app.kubernetes.io/name=playbook-controller`,
  });
  return pods.items
    .filter((pod) => pod.status?.phase === "Running" && !pod.metadata?.deletionTimestamp)
    .map((pod) => pod.metadata?.name ?? "");
}

async function rolledOut(): Promise<void> {
  const { code, stderr } = await kubectlResult([
    "-n",
    system,
    "rollout",
    "status",
    `deployment/${fullname}`,
    "--timeout=120s",
  ]);
  expect(stderr).toBe("");
  expect(code).toBe(0);
}

beforeAll(async () => {
  system = await createTestNamespace(core, "playbook-system");
  work = await createTestNamespace(core, "helm-work");
  // The dev cluster applied crds/ before the chart existed, as a user who installed the CRD by hand
  // has; Helm adopts such an object once it carries the release's ownership metadata.
  await kubectl([
    "annotate",
    "crd",
    ...CRDS,
    `meta.helm.sh/release-name=${release}`,
    `meta.helm.sh/release-namespace=${system}`,
    "--overwrite",
  ]);
  await kubectl(["label", "crd", ...CRDS, "app.kubernetes.io/managed-by=Helm", "--overwrite"]);
});

afterAll(async () => {
  if (installed) await helm(["uninstall", release, "-n", system, "--wait"]);
  await deleteTestNamespace(core, work);
  await deleteTestNamespace(core, system);
});

describe("helm install on the dev cluster", () => {
  it("installs the controller, which elects a leader and runs Playbooks applied afterwards", async () => {
    // The chart's default metrics port for both replicas: each pod has a network of its own.
    const install = await helm([
      "install",
      release,
      chart,
      "-n",
      system,
      "--wait",
      "--timeout=3m",
      "--set",
      `config.namespaces={${work}}`,
      "--set",
      "leaderElection.leaseDuration=6s",
      "--set",
      "leaderElection.renewDeadline=4s",
      "--set",
      "leaderElection.retryPeriod=1s",
    ]);
    expect(install.stderr).toBe("");
    expect(install.code).toBe(0);
    installed = true;
    expect(install.stdout).toMatch(/kubectl get pb -w/);
    await rolledOut();

    const lease = await waitFor(
      "the controller's leader Lease",
      async () => {
        const found = await coordination
          .readNamespacedLease({ namespace: system, name: fullname })
          .catch(() => undefined);
        return found?.spec?.holderIdentity ? found : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    expect(await controllerPods()).toContain(lease.spec?.holderIdentity);
    // Both replicas run (the standby ready too) and neither has restarted.
    const pods = await core.listNamespacedPod({
      namespace: system,
      labelSelector: `app.kubernetes.io/instance=${release}`,
    });
    expect(pods.items).toHaveLength(2);
    for (const pod of pods.items) {
      expect(pod.status?.phase).toBe("Running");
      expect(pod.status?.containerStatuses?.[0]?.restartCount).toBe(0);
    }

    await kubectl(["-n", work, "apply", "-f", path.join(repoRoot(), "examples", "hello.yaml")]);
    await kubectl(["-n", work, "apply", "-f", path.join(repoRoot(), "examples", "task-timeout.yaml")]);
    const hello = await waitForFinished(work, "hello", 120_000);
    expect(condition(hello, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const timedOut = await waitForFinished(work, "task-timeout", 120_000);
    expect(condition(timedOut, "Succeeded")).toMatchObject({ status: "False", reason: "TaskTimeout" });
    expect(condition(timedOut, "LimitExceeded")).toMatchObject({ status: "True", reason: "TaskTimeout" });
    const { stdout } = await kubectl(["-n", work, "get", "pb"]);
    expect(stdout).toMatch(/task-timeout\s+Failed\s+TaskTimeout\s+migrate/);
  }, 300_000);

  it("gives the controller's ServiceAccount exactly the documented permissions", async () => {
    const as = `--as=system:serviceaccount:${system}:${fullname}`;
    const granted = async (namespace: string) => {
      const { stdout } = await kubectl(["auth", "can-i", "--list", as, "-n", namespace]);
      // Rows: Resources, Non-Resource URLs, Resource Names, Verbs.
      return stdout
        .split("\n")
        .slice(1)
        .map((line) => line.trim().split(/\s{2,}/))
        .filter((cells) => cells.length >= 2 && cells[0] !== "");
    };
    // What every authenticated identity may do (system:basic-user, system:discovery): ask about
    // itself and GET discovery URLs. Nothing else comes from outside the chart's roles.
    const isBuiltIn = (cells: string[]) =>
      cells[0]?.startsWith("selfsubject") || (cells[0]?.startsWith("[/") && cells.at(-1) === "[get]");
    const rows = (await granted(work))
      .filter((cells) => !isBuiltIn(cells))
      .map((cells) => `${cells[0]} ${cells.at(-1)}`)
      .sort();
    expect(rows).toEqual(
      [
        "events [create patch]",
        "playbookpolicies.playbook.dev [list watch]",
        "playbookpolicies.playbook.dev/status [update]",
        "playbooks.playbook.dev [list watch]",
        "playbooks.playbook.dev/finalizers [update]",
        "playbooks.playbook.dev/status [update]",
        "pods [get list watch create delete patch]",
      ].sort(),
    );
    const own = (await granted(system))
      .filter((cells) => !isBuiltIn(cells))
      .map((cells) => cells.join(" "))
      .join("\n");
    expect(own).toMatch(/leases\.coordination\.k8s\.io\s+\[\]\s+\[\]\s+\[create\]/);
    expect(own).toMatch(
      new RegExp(`leases\\.coordination\\.k8s\\.io\\s+\\[\\]\\s+\\[${fullname}\\]\\s+\\[get update\\]`),
    );
    for (const namespace of [work, system, "default"]) {
      // `kubectl auth can-i VERB TYPE/NAME` reads a slash as a name: subresources take --subresource.
      for (const question of [
        ["get", "secrets"],
        ["list", "secrets"],
        ["create", "pods", "--subresource=exec"],
        ["update", "pods"],
        ["*", "*"],
      ]) {
        const { stdout } = await kubectlResult(["auth", "can-i", ...question, as, "-n", namespace]);
        expect(`${question.join(" ")} in ${namespace}: ${stdout.trim()}`).toBe(
          `${question.join(" ")} in ${namespace}: no`,
        );
      }
    }
    // Outside the watched namespace it may not even read Playbooks.
    const { stdout: elsewhere } = await kubectlResult([
      "auth",
      "can-i",
      "list",
      "playbooks",
      as,
      "-n",
      "default",
    ]);
    expect(elsewhere.trim()).toBe("no");
  });

  it("rolls the Deployment on helm upgrade with changed values", async () => {
    const before = await apps.readNamespacedDeployment({ namespace: system, name: fullname });
    const upgrade = await helm([
      "upgrade",
      release,
      chart,
      "-n",
      system,
      "--reuse-values",
      "--wait",
      "--timeout=3m",
      "--set",
      "config.logLevel=debug",
      "--set",
      "config.logFormat=text",
    ]);
    expect(upgrade.stderr).toBe("");
    expect(upgrade.code).toBe(0);
    await rolledOut();
    const after = await apps.readNamespacedDeployment({ namespace: system, name: fullname });
    expect(after.metadata?.generation).toBeGreaterThan(before.metadata?.generation ?? 0);
    const args = after.spec?.template.spec?.containers[0]?.args ?? [];
    expect(args).toContain("--log-level=debug");
    expect(args).toContain("--log-format=text");
    const pods = await core.listNamespacedPod({
      namespace: system,
      labelSelector: `app.kubernetes.io/instance=${release}`,
    });
    const live = pods.items.filter(
      (pod) => pod.status?.phase === "Running" && !pod.metadata?.deletionTimestamp,
    );
    expect(live.length).toBeGreaterThan(0);
    for (const pod of live) expect(pod.spec?.containers[0]?.args).toContain("--log-level=debug");
    // The new pods still run Playbooks.
    await kubectl(["-n", work, "apply", "-f", path.join(repoRoot(), "examples", "stall.yaml")]);
    const stalled = await waitForFinished(work, "stall", 120_000);
    expect(condition(stalled, "Succeeded")?.reason).toBe("StallLimit");
  }, 300_000);

  it("leaves the CRD and the Playbooks on helm uninstall", async () => {
    const uninstall = await helm(["uninstall", release, "-n", system, "--wait"]);
    expect(uninstall.code).toBe(0);
    installed = false;
    expect(uninstall.stdout + uninstall.stderr).toMatch(/kept due to the resource policy/);
    await waitFor(
      "the controller's pods to be gone",
      async () => ((await controllerPods()).length === 0 ? true : undefined),
      {
        timeoutMs: 60_000,
      },
    );
    const crds = await kubectlResult(["get", "crd", ...CRDS]);
    expect(crds.code).toBe(0);
    const { stdout } = await kubectl(["-n", work, "get", "pb", "-o", "name"]);
    expect(stdout.split("\n").filter(Boolean).sort()).toEqual([
      "playbook.playbook.dev/hello",
      "playbook.playbook.dev/stall",
      "playbook.playbook.dev/task-timeout",
    ]);
  }, 120_000);
});
