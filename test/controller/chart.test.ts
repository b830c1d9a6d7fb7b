// The Helm chart with the real helm and the real API server: lint, render with several value sets
// and apply each in a server-side dry run (into a namespace that enforces the `restricted` Pod
// Security Standard too), the schema's refusals, and the opt-in monitoring pieces.
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { repoRoot } from "../harness/binaries.js";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";
import { helm, kubectl, kubectlResult } from "./support.js";

const chart = path.join(repoRoot(), "charts", "playbook-controller");
const standInCrds = path.join(
  repoRoot(),
  "test",
  "harness",
  "fixtures",
  "prometheus-operator-crds.stand-in.yaml",
);

interface Rendered {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
}

const setArgs = (sets: string[]) => sets.flatMap((set) => ["--set", set]);

async function template(
  namespace: string,
  sets: string[],
  extra: string[] = [],
): Promise<{ text: string; objects: Rendered[] }> {
  const result = await helm(["template", "pbc", chart, "--namespace", namespace, ...setArgs(sets), ...extra]);
  expect(result.stderr).toBe("");
  expect(result.code).toBe(0);
  const objects = parseAllDocuments(result.stdout)
    .map((doc) => doc.toJS() as Rendered | null)
    .filter((o): o is Rendered => o !== null);
  return { text: result.stdout, objects };
}

const kinds = (objects: Rendered[]) => objects.map((o) => `${o.kind}/${o.metadata.name}`).sort();

async function monitoringApiServed(served: boolean): Promise<void> {
  await waitFor(
    `monitoring.coreos.com/v1 to be ${served ? "served" : "gone"}`,
    async () => {
      const { stdout } = await kubectl(["api-versions"]);
      return stdout.split("\n").includes("monitoring.coreos.com/v1") === served ? true : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
}

async function installStandInCrds(): Promise<void> {
  await kubectl(["apply", "-f", standInCrds]);
  await kubectl([
    "wait",
    "--for=condition=Established",
    "crd/servicemonitors.monitoring.coreos.com",
    "crd/prometheusrules.monitoring.coreos.com",
    "--timeout=60s",
  ]);
  await monitoringApiServed(true);
}

const { core } = clusterClients();
let namespace: string;
let restricted: string;
const watched: string[] = [];

beforeAll(async () => {
  namespace = await createTestNamespace(core, "chart");
  restricted = await createTestNamespace(core, "chart-restricted", {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
  });
  watched.push(
    await createTestNamespace(core, "chart-team-a"),
    await createTestNamespace(core, "chart-team-b"),
  );
  await installStandInCrds();
});

afterAll(async () => {
  for (const name of [namespace, restricted, ...watched]) if (name) await deleteTestNamespace(core, name);
  await kubectlResult(["delete", "-f", standInCrds, "--ignore-not-found"]);
});

describe("the Helm chart", () => {
  it("passes helm lint --strict with the default values and with every optional part on", async () => {
    const plain = await helm(["lint", "--strict", chart]);
    expect(plain.stdout).toContain("1 chart(s) linted, 0 chart(s) failed");
    const everything = await helm([
      "lint",
      "--strict",
      chart,
      ...setArgs([
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.force=true",
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.force=true",
        "dashboards.enabled=true",
        "config.namespaces={a,b}",
        "config.kueue=true",
        "config.defaultQueueName=team-a",
        "config.defaultQueueTimeout=1h",
      ]),
    ]);
    expect(everything.stdout).toContain("1 chart(s) linted, 0 chart(s) failed");
    expect(everything.code).toBe(0);
  });

  const valueSets: [string, string[]][] = [
    ["the default values", []],
    [
      "image by digest, pull secrets, scheduling, extra args and env",
      [
        `image.digest=sha256:${"a".repeat(64)}`,
        "imagePullSecrets[0].name=regcred",
        "nodeSelector.kubernetes\\.io/os=linux",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=kubernetes.io/arch",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=In",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]=amd64",
        "priorityClassName=system-cluster-critical",
        "extraArgs[0]=--log-level=debug",
        "extraEnv[0].name=TZ",
        "extraEnv[0].value=UTC",
        "config.metricsPlaybookLabel=app.kubernetes.io/name",
        "config.metricsTaskLabel=true",
        "config.logFormat=text",
      ],
    ],
    [
      "one replica without leader election",
      ["replicaCount=1", "leaderElection.enabled=false", "crds.install=false"],
    ],
    [
      "monitoring: ServiceMonitor, PrometheusRule and dashboard",
      [
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.additionalLabels.release=kube-prometheus-stack",
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.additionalLabels.release=kube-prometheus-stack",
        "dashboards.enabled=true",
      ],
    ],
  ];

  it.each(valueSets)(
    "renders %s, and the API server accepts every object in a server-side dry run",
    async (_, sets) => {
      // The monitoring API as the cluster serves it (the stand-in CRDs), so those objects render too.
      const { text, objects } = await template(namespace, sets, [
        "--api-versions",
        "monitoring.coreos.com/v1",
      ]);
      for (const object of objects) {
        expect(object.metadata.labels).toMatchObject({
          "app.kubernetes.io/name": "playbook-controller",
          "app.kubernetes.io/instance": "pbc",
          "app.kubernetes.io/managed-by": "Helm",
          "helm.sh/chart": expect.stringMatching(/^playbook-controller-\d/),
        });
      }
      const applied = await kubectlResult(
        ["apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-"],
        text,
      );
      expect(applied.stderr).toBe("");
      expect(applied.code).toBe(0);
      expect(applied.stdout.trim().split("\n")).toHaveLength(objects.length);
    },
  );

  it("renders what a default install needs and no more", async () => {
    const { objects } = await template(namespace, []);
    expect(kinds(objects)).toEqual([
      "ClusterRole/pbc-playbook-controller",
      "ClusterRole/pbc-playbook-controller-nodes",
      "ClusterRole/playbook-admin",
      "ClusterRole/playbook-edit",
      "ClusterRole/playbook-view",
      "ClusterRoleBinding/pbc-playbook-controller",
      "ClusterRoleBinding/pbc-playbook-controller-nodes",
      "CustomResourceDefinition/cronplaybooks.playbook.dev",
      "CustomResourceDefinition/playbookpolicies.playbook.dev",
      "CustomResourceDefinition/playbooks.playbook.dev",
      "Deployment/pbc-playbook-controller",
      "PodDisruptionBudget/pbc-playbook-controller",
      "Role/pbc-playbook-controller-leader-election",
      "RoleBinding/pbc-playbook-controller-leader-election",
      "Service/pbc-playbook-controller-metrics",
      "ServiceAccount/pbc-playbook-controller",
      "ValidatingAdmissionPolicy/pbc-playbook-controller.playbook.dev",
      "ValidatingAdmissionPolicyBinding/pbc-playbook-controller.playbook.dev",
    ]);
    const deployment = objects.find((o) => o.kind === "Deployment");
    expect(deployment?.spec).toMatchObject({ replicas: 2 });
    for (const file of [
      "playbook.dev_playbooks.yaml",
      "playbook.dev_playbookpolicies.yaml",
      "playbook.dev_cronplaybooks.yaml",
    ]) {
      const source = parse(readFileSync(path.join(repoRoot(), "crds", file), "utf8")) as Rendered;
      const crd = objects.find(
        (o) => o.kind === "CustomResourceDefinition" && o.metadata.name === source.metadata.name,
      );
      expect(crd?.metadata.annotations).toMatchObject({ "helm.sh/resource-policy": "keep" });
      expect(crd?.spec).toEqual(source.spec);
    }
  });

  it("lets the release's controller through its admission policy, grants it no read of Secrets, and renders no policy with admissionPolicy.enabled false", async () => {
    const { objects } = await template(namespace, []);
    const policy = objects.find((o) => o.kind === "ValidatingAdmissionPolicy") as
      | (Rendered & { spec: { matchConditions: { expression: string }[] } })
      | undefined;
    expect(policy?.spec.matchConditions).toEqual([
      {
        name: "not-the-controller",
        expression: `request.userInfo.username != 'system:serviceaccount:${namespace}:pbc-playbook-controller'`,
      },
    ]);
    const rules = objects
      .filter((o) => o.kind === "ClusterRole" && o.metadata.name.startsWith("pbc-"))
      .flatMap((o) => (o as unknown as { rules: { resources: string[]; verbs: string[] }[] }).rules);
    expect(rules.filter((r) => r.resources.includes("secrets") || r.resources.includes("*"))).toEqual([]);
    const off = await template(namespace, ["admissionPolicy.enabled=false"]);
    expect(off.objects.filter((o) => o.kind.startsWith("ValidatingAdmissionPolicy"))).toEqual([]);
  });

  it("grants a Role in each watched namespace instead of a ClusterRole when config.namespaces is set", async () => {
    const { text, objects } = await template(namespace, [`config.namespaces={${watched.join(",")}}`]);
    const roles = objects.filter((o) => o.kind === "Role" || o.kind === "RoleBinding");
    expect(roles.map((o) => `${o.kind}/${o.metadata.namespace}`).sort()).toEqual(
      [
        `Role/${namespace}`,
        `RoleBinding/${namespace}`,
        ...watched.flatMap((ns) => [`Role/${ns}`, `RoleBinding/${ns}`]),
      ].sort(),
    );
    // Nodes are the cluster's: --agent-delivery auto reads their runtimes through a ClusterRole.
    expect(kinds(objects).filter((k) => k.startsWith("ClusterRole"))).toEqual([
      "ClusterRole/pbc-playbook-controller-nodes",
      "ClusterRole/playbook-admin",
      "ClusterRole/playbook-edit",
      "ClusterRole/playbook-view",
      "ClusterRoleBinding/pbc-playbook-controller-nodes",
    ]);
    const deployment = objects.find((o) => o.kind === "Deployment") as unknown as {
      spec: { template: { spec: { containers: { args: string[] }[] } } };
    };
    const args = deployment.spec.template.spec.containers[0]?.args;
    expect(args).toContain(`--namespaces=${watched.join(",")}`);
    const applied = await kubectlResult(["apply", "--dry-run=server", "-f", "-"], text);
    expect(applied.code).toBe(0);
  });

  it("watches nodes only for --agent-delivery auto or --user-namespaces auto: fixed settings are passed on and grant only get on nodes (adoption reads a found pod's node)", async () => {
    const nodesRole = (list: Rendered[]) =>
      list.find((o) => o.kind === "ClusterRole" && o.metadata.name.endsWith("-nodes")) as unknown as {
        rules: unknown[];
      };
    const argsOf = (list: Rendered[]) =>
      (
        list.find((o) => o.kind === "Deployment") as unknown as {
          spec: { template: { spec: { containers: { args: string[] }[] } } };
        }
      ).spec.template.spec.containers[0]?.args;
    const fixed = (await template(namespace, ["config.agentDelivery=post-start", "config.userNamespaces=on"]))
      .objects;
    // The RuntimeClass a found pod names: its admission's additions (overhead, scheduling) are allowed as read.
    const runtimeClasses = { apiGroups: ["node.k8s.io"], resources: ["runtimeclasses"], verbs: ["get"] };
    expect(nodesRole(fixed).rules).toEqual([
      { apiGroups: [""], resources: ["nodes"], verbs: ["get"] },
      runtimeClasses,
    ]);
    expect(argsOf(fixed)).toEqual(
      expect.arrayContaining(["--agent-delivery=post-start", "--user-namespaces=on"]),
    );
    const watching = [["config.agentDelivery=post-start"], ["config.userNamespaces=off"], []];
    for (const values of watching) {
      const { objects } = await template(namespace, values);
      expect(nodesRole(objects).rules, values.join(" ")).toEqual([
        { apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch"] },
        runtimeClasses,
      ]);
    }
    expect(argsOf((await template(namespace, [])).objects)).toContain("--user-namespaces=auto");
  });

  it("reads Kueue's Workloads only with config.kueue: the flags passed on, get/list/watch on workloads in every role", async () => {
    type Role = Rendered & { rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] };
    type Deployment = Rendered & { spec: { template: { spec: { containers: { args: string[] }[] } } } };
    const workloadRules = (objects: Rendered[]) =>
      (objects.filter((o) => o.kind === "ClusterRole" || o.kind === "Role") as Role[]).flatMap((role) =>
        role.rules
          .filter((rule) => rule.apiGroups.includes("kueue.x-k8s.io"))
          .map((rule) => ({
            role: `${role.kind}/${role.metadata.namespace ?? ""}/${role.metadata.name}`,
            ...rule,
          })),
      );
    const argsOf = (objects: Rendered[]) =>
      (objects.find((o) => o.kind === "Deployment") as Deployment).spec.template.spec.containers[0]?.args ??
      [];

    const plain = await template(namespace, []);
    expect(workloadRules(plain.objects)).toEqual([]);
    expect(argsOf(plain.objects).filter((arg) => /kueue|queue/.test(arg))).toEqual([]);
    expect(argsOf(plain.objects)).toContain("--default-max-preemptions=5");

    const withKueue = await template(namespace, [
      "config.kueue=true",
      "config.defaultQueueName=team-a",
      "config.defaultQueueTimeout=1h",
      "config.defaultMaxPreemptions=2",
    ]);
    expect(argsOf(withKueue.objects)).toEqual(
      expect.arrayContaining([
        "--kueue=true",
        "--default-queue-name=team-a",
        "--default-queue-timeout=1h",
        "--default-max-preemptions=2",
      ]),
    );
    const rule = { apiGroups: ["kueue.x-k8s.io"], resources: ["workloads"], verbs: ["get", "list", "watch"] };
    // The flavors a found pod's Workload was admitted with: cluster-scoped, read one by one.
    const flavors = {
      role: "ClusterRole//pbc-playbook-controller-nodes",
      apiGroups: ["kueue.x-k8s.io"],
      resources: ["resourceflavors"],
      verbs: ["get"],
    };
    expect(workloadRules(withKueue.objects)).toEqual([
      { role: "ClusterRole//pbc-playbook-controller", ...rule },
      flavors,
    ]);

    const watched = await template(namespace, ["config.kueue=true", "config.namespaces={ns-a,ns-b}"]);
    expect(workloadRules(watched.objects)).toEqual([
      flavors,
      { role: "Role/ns-a/pbc-playbook-controller", ...rule },
      { role: "Role/ns-b/pbc-playbook-controller", ...rule },
    ]);
    const applied = await kubectlResult(["apply", "--dry-run=server", "-f", "-"], withKueue.text);
    expect(applied.code).toBe(0);
  });

  it("refuses a default queue name that is no LocalQueue name and a queue timeout that is no duration", async () => {
    for (const [set, field] of [
      ["config.defaultQueueName=Team_A", "defaultQueueName"],
      ["config.defaultQueueTimeout=an hour", "defaultQueueTimeout"],
      ["config.defaultMaxPreemptions=101", "defaultMaxPreemptions"],
    ] as const) {
      const result = await helm(["template", "pbc", chart, "--namespace", namespace, "--set", set]);
      expect(result.code).not.toBe(0);
      expect(result.stderr).toContain(field);
    }
  });

  it("runs its pods under the restricted Pod Security Standard", async () => {
    const { text, objects } = await template(restricted, []);
    const applied = await kubectlResult(["apply", "--dry-run=server", "-f", "-"], text);
    expect(applied.code).toBe(0);
    // The namespace warns on workloads whose pods would break `restricted`: none here.
    expect(applied.stderr).not.toMatch(/violate PodSecurity/);
    const deployment = objects.find((o) => o.kind === "Deployment") as unknown as {
      spec: { template: { spec: unknown; metadata: unknown } };
    };
    const pod = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "controller-pod", namespace: restricted },
      spec: deployment.spec.template.spec,
    };
    await kubectl(["-n", restricted, "create", "serviceaccount", "pbc-playbook-controller"]);
    const created = await kubectlResult(["create", "--dry-run=server", "-f", "-"], JSON.stringify(pod));
    expect(created.stderr).toBe("");
    expect(created.code).toBe(0);

    // The same check refuses a pod that may run as root: it can fail.
    const rooted = await template(restricted, ["podSecurityContext.runAsNonRoot=false"]);
    const warned = await kubectlResult(["apply", "--dry-run=server", "-f", "-"], rooted.text);
    expect(warned.stderr).toMatch(/would violate PodSecurity "restricted:latest".*runAsNonRoot/s);
  });

  it.each([
    ["config.logFormat=xml", /config\/logFormat.*(json|must be one of)/s],
    ["replicaCount=-1", /replicaCount.*minimum/s],
    ["config.defaultCeiling=1x", /config\/defaultCeiling.*(pattern|does not match)/s],
    ["config.workers=0", /config\/workers.*minimum/s],
    ["image.pullPolicy=Sometimes", /image\/pullPolicy/],
    ["metrics.serviceMonitor.intervall=1m", /intervall/],
    ["nosuchKey=1", /nosuchKey/],
    ["config.namespaces[0]=Not_A_Namespace", /config\/namespaces\/0/],
  ])("refuses --set %s before anything is applied, naming the value", async (set, message) => {
    const result = await helm(["template", "pbc", chart, "--namespace", namespace, "--set", set]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/values don't meet the specifications of the schema/);
    expect(result.stderr).toMatch(message);
  });

  it("renders the ServiceMonitor and PrometheusRule only where the monitoring API exists, unless forced", async () => {
    const monitoring = ["metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true"];
    const without = await template(namespace, monitoring);
    expect(kinds(without.objects).filter((k) => /ServiceMonitor|PrometheusRule/.test(k))).toEqual([]);
    const withApi = await template(namespace, monitoring, ["--api-versions", "monitoring.coreos.com/v1"]);
    expect(kinds(withApi.objects).filter((k) => /ServiceMonitor|PrometheusRule/.test(k))).toEqual([
      "PrometheusRule/pbc-playbook-controller",
      "ServiceMonitor/pbc-playbook-controller",
    ]);
    const forced = await template(namespace, [
      ...monitoring,
      "metrics.serviceMonitor.force=true",
      "metrics.prometheusRule.force=true",
    ]);
    expect(kinds(forced.objects).filter((k) => /ServiceMonitor|PrometheusRule/.test(k))).toHaveLength(2);
  });

  it("says in NOTES.txt when the ServiceMonitor was skipped, and renders it against a cluster that serves the API", async () => {
    // The dev cluster's CRD is not this release's: a real install would adopt it (see test/real-node/helm-release.test.ts).
    const sets = setArgs([
      "metrics.serviceMonitor.enabled=true",
      "metrics.prometheusRule.enabled=true",
      "crds.install=false",
    ]);
    // A cluster without prometheus-operator: the stand-in CRDs go away for a moment.
    await kubectl(["delete", "-f", standInCrds, "--wait"]);
    await monitoringApiServed(false);
    const offline = await helm(["install", "pbc", chart, "-n", namespace, "--dry-run=server", ...sets]);
    expect(offline.stderr).toBe("");
    expect(offline.code).toBe(0);
    expect(offline.stdout).toMatch(/no ServiceMonitor was created/);
    expect(offline.stdout).toMatch(/no PrometheusRule was created/);
    // The stand-in CRDs make the cluster serve monitoring.coreos.com/v1 again.
    await installStandInCrds();
    const online = await helm(["install", "pbc", chart, "-n", namespace, "--dry-run=server", ...sets]);
    expect(online.stderr).toBe("");
    expect(online.code).toBe(0);
    expect(online.stdout).toMatch(/kind: ServiceMonitor/);
    expect(online.stdout).toMatch(/kind: PrometheusRule/);
    expect(online.stdout).not.toMatch(/was created/);
    expect(online.stdout).toMatch(/kubectl get pb -w/);
  });

  it("puts the additional labels that kube-prometheus-stack selects on on the ServiceMonitor and PrometheusRule", async () => {
    const { objects } = await template(namespace, [
      "metrics.serviceMonitor.enabled=true",
      "metrics.serviceMonitor.force=true",
      "metrics.serviceMonitor.additionalLabels.release=prom",
      "metrics.prometheusRule.enabled=true",
      "metrics.prometheusRule.force=true",
      "metrics.prometheusRule.additionalLabels.release=prom",
    ]);
    for (const kind of ["ServiceMonitor", "PrometheusRule"]) {
      expect(objects.find((o) => o.kind === kind)?.metadata.labels).toMatchObject({ release: "prom" });
    }
    const rule = objects.find((o) => o.kind === "PrometheusRule");
    const plain = parse(readFileSync(path.join(chart, "alerts", "playbook-controller.rules.yaml"), "utf8"));
    expect(rule?.spec).toEqual(plain);
  });

  it("labels the dashboard ConfigMap for the Grafana sidecar, with its folder, holding the chart's JSON", async () => {
    const { objects } = await template(namespace, [
      "dashboards.enabled=true",
      "dashboards.label=my_dashboards",
      "dashboards.labelValue=yes",
      "dashboards.folder=Platform",
    ]);
    const maps = objects.filter((o) => o.kind === "ConfigMap");
    expect(maps.length).toBeGreaterThan(0);
    for (const map of maps) {
      expect(map.metadata.labels).toMatchObject({ my_dashboards: "yes" });
      expect(map.metadata.annotations).toEqual({ grafana_folder: "Platform" });
      for (const [file, json] of Object.entries(map.data ?? {})) {
        expect(json).toBe(readFileSync(path.join(chart, "dashboards", file), "utf8").replace(/\n$/, ""));
        expect(() => JSON.parse(json)).not.toThrow();
      }
    }
    const off = await template(namespace, []);
    expect(off.objects.filter((o) => o.kind === "ConfigMap")).toEqual([]);
  });

  it("tells in NOTES.txt how to read /metrics through the Service and port it renders, and without the Service", async () => {
    const install = async (sets: string[]) => {
      const result = await helm([
        "install",
        "pbc",
        chart,
        "-n",
        namespace,
        "--dry-run=server",
        ...setArgs(sets),
      ]);
      expect(result.stderr).toBe("");
      expect(result.code).toBe(0);
      const [manifest = "", notes = ""] = result.stdout.split("\nNOTES:\n");
      const objects = parseAllDocuments(manifest.slice(manifest.indexOf("---")))
        .map((doc) => doc.toJS() as Rendered | null)
        .filter((o): o is Rendered => o !== null);
      return { objects, notes };
    };
    const withService = await install(["crds.install=false", "metrics.service.port=9090"]);
    const service = withService.objects.find((o) => o.kind === "Service");
    const port = (service?.spec?.ports as { name: string; port: number }[] | undefined)?.[0];
    expect(port).toMatchObject({ name: "metrics", port: 9090 });
    const name = service?.metadata.name;
    expect(withService.notes).toContain(`kubectl -n ${namespace} port-forward svc/${name} 9090\n`);
    expect(withService.notes).toContain("curl -s localhost:9090/metrics");
    expect(withService.notes).toContain(
      `kubectl get --raw /api/v1/namespaces/${namespace}/services/${name}:${port?.name}/proxy/metrics`,
    );
    const withoutService = await install(["crds.install=false", "metrics.service.enabled=false"]);
    expect(withoutService.objects.filter((o) => o.kind === "Service")).toEqual([]);
    const deployment = withoutService.objects.find((o) => o.kind === "Deployment");
    type PodTemplate = { template: { spec: { containers: { ports?: { containerPort: number }[] }[] } } };
    const containerPort = (deployment?.spec as PodTemplate | undefined)?.template.spec.containers[0]
      ?.ports?.[0]?.containerPort;
    expect(containerPort).toBe(8080);
    expect(withoutService.notes).toContain(
      `kubectl -n ${namespace} port-forward deployment/${deployment?.metadata.name} ${containerPort}\n`,
    );
  });

  it("leaves the CRD to the user when crds.install is false, and does not keep it when crds.keep is false", async () => {
    const none = await template(namespace, ["crds.install=false"]);
    expect(kinds(none.objects).filter((k) => k.startsWith("CustomResourceDefinition"))).toEqual([]);
    const notKept = await template(namespace, ["crds.keep=false"]);
    const crd = notKept.objects.find((o) => o.kind === "CustomResourceDefinition");
    expect(crd?.metadata.annotations?.["helm.sh/resource-policy"]).toBeUndefined();
  });
});
