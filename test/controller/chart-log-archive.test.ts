// The chart's logArchive values (docs/log-archive.md) with the real helm and API server: turned on,
// they become the controller's --log-archive-* flags and the credentials Secret's two keys in the
// controller container's env, nowhere else; the schema refuses what the controller would (no
// bucket, an endpoint or pod endpoint that is no http(s) URL, a prefix not ending in '/'); off, no
// archive flag.
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { repoRoot } from "../harness/binaries.js";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { helm, kubectlResult } from "./support.js";

const chart = path.join(repoRoot(), "charts", "playbook-controller");
const { core } = clusterClients();
let namespace = "";

beforeAll(async () => {
  namespace = await createTestNamespace(core, "chart-archive");
});
afterAll(async () => {
  if (namespace) await deleteTestNamespace(core, namespace);
});

interface EnvVar {
  name: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string } };
}
interface PodSpec {
  containers: { name: string; args?: string[]; env?: EnvVar[] }[];
}
interface Rendered {
  kind: string;
  metadata: { name: string };
  spec?: { template?: { spec: PodSpec } };
  rules?: { apiGroups: string[]; resources: string[]; verbs: string[] }[];
}

/** The rules on Secrets of the controller's own roles (not the log API's reader roles). */
function secretRules(objects: (Rendered | null)[]) {
  return objects
    .filter((o) => (o?.kind === "ClusterRole" || o?.kind === "Role") && !o.metadata.name.includes("log"))
    .flatMap((o) => o?.rules ?? [])
    .filter((rule) => rule.resources.includes("secrets"));
}

async function render(sets: string[]) {
  const result = await helm([
    "template",
    "pbc",
    chart,
    "--namespace",
    namespace,
    ...sets.flatMap((set) => ["--set", set]),
  ]);
  return { ...result, objects: parseAllDocuments(result.stdout).map((d) => d.toJS() as Rendered | null) };
}

const ON = [
  "logArchive.enabled=true",
  "logArchive.bucket=playbook-logs",
  "logArchive.endpoint=http://seaweedfs.storage:8333",
  "logArchive.podEndpoint=http://10.87.0.1:8333",
  "logArchive.prefix=playbooks/",
  "logArchive.forcePathStyle=true",
];

function controllerOf(objects: (Rendered | null)[]) {
  const deployment = objects.find((o) => o?.kind === "Deployment");
  const container = deployment?.spec?.template?.spec.containers.find((c) => c.name === "controller");
  if (!container) throw new Error("no controller container rendered");
  return container;
}

describe("the chart's logArchive values", () => {
  it("turned on, pass the archive's flags and put the Secret's keys in the controller's env only", async () => {
    const on = await render(ON);
    expect(on.code, on.stderr).toBe(0);
    const controller = controllerOf(on.objects);
    expect(controller.args).toEqual(
      expect.arrayContaining([
        "--log-archive-bucket=playbook-logs",
        "--log-archive-endpoint=http://seaweedfs.storage:8333",
        "--log-archive-pod-endpoint=http://10.87.0.1:8333",
        "--log-archive-region=us-east-1",
        "--log-archive-prefix=playbooks/",
        "--log-archive-force-path-style=true",
        "--log-archive-upload=runner",
        "--log-archive-delete-timeout=10m",
      ]),
    );
    // The runner's upload Secrets: made and deleted, never read, by the controller's own role.
    expect(secretRules(on.objects)).toEqual([
      { apiGroups: [""], resources: ["secrets"], verbs: ["create", "delete"] },
    ]);
    const keys = (controller.env ?? []).filter((e) => e.name.startsWith("AWS_"));
    expect(keys).toEqual([
      {
        name: "AWS_ACCESS_KEY_ID",
        valueFrom: { secretKeyRef: { name: "playbook-log-archive", key: "AWS_ACCESS_KEY_ID" } },
      },
      {
        name: "AWS_SECRET_ACCESS_KEY",
        valueFrom: { secretKeyRef: { name: "playbook-log-archive", key: "AWS_SECRET_ACCESS_KEY" } },
      },
    ]);
    // Nothing else the chart renders names the Secret: no other pod, no role reading Secrets.
    expect(on.stdout.split("playbook-log-archive").length - 1).toBe(2);
    // Every object names its namespace (the log API's reader binding is in kube-system): no -n.
    const applied = await kubectlResult(["apply", "--dry-run=server", "-f", "-"], on.stdout);
    expect(applied.code, applied.stderr).toBe(0);

    const chain = controllerOf((await render([...ON, "logArchive.credentialsSecret="])).objects);
    expect((chain.env ?? []).filter((e) => e.name.startsWith("AWS_"))).toEqual([]);
    // No podEndpoint: no flag, the controller signs the runner's uploads for the endpoint.
    const samePlace = controllerOf((await render([...ON, "logArchive.podEndpoint="])).objects);
    expect((samePlace.args ?? []).filter((a) => a.startsWith("--log-archive-pod-endpoint"))).toEqual([]);

    // The controller follows the logs: no Secret is made, and the role has no rule on them.
    const follow = await render([...ON, "logArchive.upload=follow"]);
    expect(controllerOf(follow.objects).args).toContain("--log-archive-upload=follow");
    expect(secretRules(follow.objects)).toEqual([]);

    const off = controllerOf((await render([])).objects);
    expect((off.args ?? []).filter((a) => a.startsWith("--log-archive-"))).toEqual([
      "--log-archive-delete-timeout=10m",
    ]);
    expect((off.env ?? []).filter((e) => e.name.startsWith("AWS_"))).toEqual([]);
  });

  it.each([
    ["on without a bucket", ["logArchive.enabled=true"], "/logArchive/bucket"],
    ["a bucket that is no S3 name", [...ON, "logArchive.bucket=Logs_1"], "/logArchive/bucket"],
    [
      "an endpoint that is no http(s) URL",
      [...ON, "logArchive.endpoint=ftp://store"],
      "/logArchive/endpoint",
    ],
    [
      "a pod endpoint that is no http(s) URL",
      [...ON, "logArchive.podEndpoint=10.87.0.1:8333"],
      "/logArchive/podEndpoint",
    ],
    ["a prefix not ending in '/'", [...ON, "logArchive.prefix=playbooks"], "/logArchive/prefix"],
    [
      "an upload that is neither runner nor follow",
      [...ON, "logArchive.upload=controller"],
      "/logArchive/upload",
    ],
    [
      "a delete timeout that is no duration",
      [...ON, "logArchive.deleteTimeout=ten minutes"],
      "/logArchive/deleteTimeout",
    ],
    ["an unknown key", [...ON, "logArchive.secret=x"], "secret"],
  ])("refuses %s", async (_name, sets, field) => {
    const result = await render(sets);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(field);
  });
});
