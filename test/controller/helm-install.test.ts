// The controller's ServiceAccount as `helm install` makes it, checked against the API server:
// exactly the documented permissions. A release of no replicas (`replicaCount=0`, CRDs left to
// the cluster's setup): RBAC does not depend on either, and nothing here needs a pod, so it runs
// on a control plane with no kubelet. The release's pods (leader election, Playbooks run, `helm
// upgrade` rolling the Deployment, `helm uninstall` keeping the CRDs) run on the real node:
// test/real-node/helm-release.test.ts and test/real-node/install.test.ts.
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { helm, kubectl, kubectlResult } from "./support.js";

const chart = path.join(repoRoot(), "charts", "playbook-controller");
const release = "pbc";
const fullname = "pbc-playbook-controller";

const { core } = clusterClients();
let system: string;
let work: string;
let installed = false;

beforeAll(async () => {
  system = await createTestNamespace(core, "playbook-system");
  work = await createTestNamespace(core, "helm-work");
  const install = await helm([
    "install",
    release,
    chart,
    "-n",
    system,
    "--set",
    `config.namespaces={${work}}`,
    "--set",
    "replicaCount=0",
    "--set",
    "crds.install=false",
  ]);
  expect(install.stderr).toBe("");
  expect(install.code).toBe(0);
  installed = true;
});

afterAll(async () => {
  if (installed) await helm(["uninstall", release, "-n", system]);
  await deleteTestNamespace(core, work);
  await deleteTestNamespace(core, system);
});

describe("helm install's ServiceAccount", () => {
  it("has exactly the documented permissions", async () => {
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
        "events [create patch list]",
        // --agent-delivery auto (the default) reads each node's container runtime.
        "nodes [get list watch]",
        "playbookpolicies.playbook.dev [list watch]",
        "playbookpolicies.playbook.dev/status [update]",
        "cronplaybooks.playbook.dev [list watch]",
        "cronplaybooks.playbook.dev/finalizers [update]",
        "cronplaybooks.playbook.dev/status [update]",
        "playbooks.playbook.dev [list watch get create patch delete]",
        "playbooks.playbook.dev/finalizers [update]",
        "playbooks.playbook.dev/status [update]",
        "pods [get list watch create delete patch]",
        // Live progress: the runner container's log of a running run's pod.
        "pods/log [get]",
        // A Playbook's service account, before its pod: one that disallows its token gets none.
        "serviceaccounts [get]",
        // The RuntimeClass a found pod names: its admission's additions are accepted only as read.
        "runtimeclasses.node.k8s.io [get]",
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
});
