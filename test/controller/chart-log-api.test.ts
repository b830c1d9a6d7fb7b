// The chart's log API (templates/log-api.yaml) with the real helm and API server: with the archive
// on, the APIService trusts the CA that signed the controller's serving certificate for the
// Service's name, the controller may check callers again (auth-delegator, the authentication
// reader in kube-system), view, edit and admin get playbooklogs and playbooklogs/log, and the API server accepts every
// object in a server-side dry run. Off, none of it renders.
import { X509Certificate } from "node:crypto";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { repoRoot } from "../harness/binaries.js";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { helm, kubectlResult } from "./support.js";

const chart = path.join(repoRoot(), "charts", "playbook-controller");

interface Rendered {
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec?: Record<string, unknown> & {
    template?: { spec: { containers: { args: string[]; ports: { name: string }[] }[] } };
  };
  data?: Record<string, string>;
  roleRef?: { name: string };
  rules?: { apiGroups: string[]; resources: string[]; verbs: string[] }[];
}

const { core } = clusterClients();
let namespace = "";

beforeAll(async () => {
  namespace = await createTestNamespace(core, "chart-log-api");
});
afterAll(async () => {
  if (namespace) await deleteTestNamespace(core, namespace);
});

async function template(sets: string[]): Promise<{ text: string; objects: Rendered[] }> {
  const result = await helm([
    "template",
    "pbc",
    chart,
    "--namespace",
    namespace,
    ...sets.flatMap((set) => ["--set", set]),
  ]);
  expect(result.stderr).toBe("");
  expect(result.code).toBe(0);
  const objects = parseAllDocuments(result.stdout)
    .map((doc) => doc.toJS() as Rendered | null)
    .filter((o): o is Rendered => o !== null);
  return { text: result.stdout, objects };
}

const find = (objects: Rendered[], kind: string, name: string) =>
  objects.find((o) => o.kind === kind && o.metadata.name === name);

describe("the chart's log API", () => {
  it("registers the APIService with the CA of the controller's certificate, and grants get playbooklogs and playbooklogs/log to view, edit and admin", async () => {
    const { text, objects } = await template(["logArchive.enabled=true", "logArchive.bucket=playbook-logs"]);
    const apiService = find(objects, "APIService", "v1alpha1.logs.playbook.dev");
    expect(apiService?.spec).toMatchObject({
      group: "logs.playbook.dev",
      version: "v1alpha1",
      service: { name: "pbc-playbook-controller-log-api", namespace, port: 443 },
    });
    expect(apiService?.spec).not.toHaveProperty("insecureSkipTLSVerify");
    const secret = find(objects, "Secret", "pbc-playbook-controller-log-api-tls");
    const ca = new X509Certificate(Buffer.from(String(apiService?.spec?.caBundle), "base64"));
    const serving = new X509Certificate(Buffer.from(String(secret?.data?.["tls.crt"]), "base64"));
    // The API server dials the Service by the name <service>.<namespace>.svc.
    expect(serving.checkHost(`pbc-playbook-controller-log-api.${namespace}.svc`)).toBeDefined();
    expect(serving.verify(ca.publicKey)).toBe(true);

    const container = find(objects, "Deployment", "pbc-playbook-controller")?.spec?.template?.spec
      .containers[0];
    expect(container?.args).toEqual(
      expect.arrayContaining([
        "--log-api-address=:8443",
        "--log-api-cert-file=/etc/playbook/log-api/tls.crt",
        "--log-api-key-file=/etc/playbook/log-api/tls.key",
      ]),
    );
    expect(container?.ports.map((p) => p.name)).toContain("log-api");

    expect(
      find(objects, "ClusterRoleBinding", "pbc-playbook-controller-log-api-auth-delegator")?.roleRef?.name,
    ).toBe("system:auth-delegator");
    const reader = find(objects, "RoleBinding", "pbc-playbook-controller-log-api-auth-reader");
    expect(reader?.metadata.namespace).toBe("kube-system");
    expect(reader?.roleRef?.name).toBe("extension-apiserver-authentication-reader");
    const logReader = find(objects, "ClusterRole", "playbook-log-reader");
    expect(logReader?.metadata.labels).toMatchObject({
      "rbac.authorization.k8s.io/aggregate-to-view": "true",
      "rbac.authorization.k8s.io/aggregate-to-edit": "true",
      "rbac.authorization.k8s.io/aggregate-to-admin": "true",
    });
    expect(logReader?.rules).toEqual([
      { apiGroups: ["logs.playbook.dev"], resources: ["playbooklogs", "playbooklogs/log"], verbs: ["get"] },
    ]);

    const applied = await kubectlResult(
      ["apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-"],
      text,
    );
    expect(applied.stderr).toBe("");
    expect(applied.code).toBe(0);
  });

  it("renders none of it while the archive is off", async () => {
    const { objects } = await template([]);
    expect(objects.filter((o) => /log-api|log-reader/.test(o.metadata.name))).toEqual([]);
    expect(find(objects, "APIService", "v1alpha1.logs.playbook.dev")).toBeUndefined();
  });
});
