// A release of the chart through its life on the real node, with the project's image the node has
// imported: `helm install` adopting the CRDs a user applied by hand, two replicas of which one
// holds the leader Lease, a Playbook applied afterwards run to Succeeded, Prometheus (Debian's, on
// this machine) scraping each endpoint of the metrics Service through the API server's
// `pods/proxy` (no ServiceMonitor, no prometheus-operator) and `playbook_runs_total` holding that
// run, `helm upgrade` with changed values rolling the Deployment to pods that still run
// Playbooks, and `helm uninstall` keeping the CRDs (their resource policy) and the Playbooks.
// install.test.ts covers the rest of the user's path on a cluster of its own: the image pulled
// from a registry, the chart's probes and security context, the NOTES' /metrics commands, a
// TaskTimeout run and an uninstall with crds.install=false. The ServiceAccount's permissions need
// no pod: test/controller/helm-install.test.ts checks them against the API server alone.
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { AppsV1Api, CoordinationV1Api, DiscoveryV1Api, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { z } from "zod";
import { condition, helm, kubectl, kubectlResult, waitForFinished } from "../controller/support.js";
import { repoRoot } from "../harness/binaries.js";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  freePort,
  logTail,
  type StartedProcess,
  startProcess,
  stopProcess,
  waitFor,
} from "../harness/processes.js";

const chart = path.join(repoRoot(), "charts", "playbook-controller");
const release = "pbc";
const fullname = "pbc-playbook-controller";
const CRDS = ["playbooks.playbook.dev", "playbookpolicies.playbook.dev", "cronplaybooks.playbook.dev"];

const { core, kubeConfig } = clusterClients();
const apps = kubeConfig.makeApiClient(AppsV1Api);
const coordination = kubeConfig.makeApiClient(CoordinationV1Api);
const discovery = kubeConfig.makeApiClient(DiscoveryV1Api);
let system: string;
let work: string;
let installed = false;
let prometheus: StartedProcess | undefined;
let prometheusUrl = "";
let workDir = "";

// The image the real node has imported (localhost/playbook-controller:<version>), as chart values.
const imageParts = /^([^/]+)\/(.+):([^:/]+)$/.exec(inject("runnerImage"));
const imageValues = [
  `image.registry=${imageParts?.[1]}`,
  `image.repository=${imageParts?.[2]}`,
  `image.tag=${imageParts?.[3]}`,
  // Imported, never pulled: nothing outside this machine is reachable.
  "image.pullPolicy=Never",
];

/** Runs a step and prints how long it took (`[helm-release]` lines on stderr). */
async function timed<T>(step: string, action: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  try {
    return await action();
  } finally {
    process.stderr.write(`[helm-release] ${step}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  }
}

async function controllerPods(): Promise<V1Pod[]> {
  const pods = await core.listNamespacedPod({
    namespace: system,
    labelSelector: `app.kubernetes.io/instance=${release},app.kubernetes.io/name=playbook-controller`,
  });
  return pods.items;
}

const running = (pods: V1Pod[]) =>
  pods.filter((pod) => pod.status?.phase === "Running" && !pod.metadata?.deletionTimestamp);

async function rolledOut(): Promise<void> {
  const { code, stderr } = await kubectlResult([
    "-n",
    system,
    "rollout",
    "status",
    `deployment/${fullname}`,
    "--timeout=180s",
  ]);
  expect(stderr).toBe("");
  expect(code).toBe(0);
}

async function leaseHolder(): Promise<string> {
  return waitFor(
    "the controller's leader Lease",
    async () =>
      (await coordination.readNamespacedLease({ namespace: system, name: fullname }).catch(() => undefined))
        ?.spec?.holderIdentity ?? undefined,
    { timeoutMs: 90_000, intervalMs: 250 },
  );
}

/** What a user looks at when the release does not come up: pods, their events, the controller's log. */
async function diagnose(): Promise<string> {
  const parts: string[] = [];
  for (const args of [
    ["-n", system, "get", "pods", "-o", "wide"],
    ["-n", system, "describe", "pods"],
    ["-n", system, "logs", "--all-containers", "--tail=40", "-l", `app.kubernetes.io/instance=${release}`],
  ]) {
    const { stdout, stderr } = await kubectlResult(args);
    parts.push(`$ kubectl ${args.join(" ")}\n${stdout}${stderr}`);
  }
  return parts.join("\n");
}

const apiServer = new URL(kubeConfig.getCurrentCluster()?.server ?? "https://unset");
let targetsFile = "";

/**
 * Prometheus' file discovery from the metrics Service's EndpointSlices: for each endpoint's pod, a
 * target at the API server whose path is that pod's `pods/proxy` at the slice's `metrics` port.
 * Returns the pods written.
 */
async function writeTargets(): Promise<string[]> {
  const slices = await discovery.listNamespacedEndpointSlice({
    namespace: system,
    labelSelector: `kubernetes.io/service-name=${fullname}-metrics`,
  });
  const targets = slices.items.flatMap((slice) => {
    const port = slice.ports?.find((p) => p.name === "metrics")?.port;
    return (slice.endpoints ?? [])
      .filter((endpoint) => endpoint.targetRef?.kind === "Pod" && port !== undefined)
      .map((endpoint) => ({
        targets: [apiServer.host],
        labels: {
          __metrics_path__: `/api/v1/namespaces/${system}/pods/${endpoint.targetRef?.name}:${port}/proxy/metrics`,
          pod: endpoint.targetRef?.name ?? "",
        },
      }));
  });
  // Written whole, then renamed: Prometheus never reads half a file.
  writeFileSync(`${targetsFile}.partial`, JSON.stringify(targets));
  renameSync(`${targetsFile}.partial`, targetsFile);
  return targets.map((target) => target.labels.pod);
}

const QueryResponse = z.discriminatedUnion("status", [
  z.object({
    status: z.literal("success"),
    data: z.object({
      resultType: z.string(),
      result: z.array(
        z.object({ metric: z.record(z.string(), z.string()), value: z.tuple([z.number(), z.string()]) }),
      ),
    }),
  }),
  z.object({ status: z.literal("error"), errorType: z.string(), error: z.string() }),
]);

/** An instant query of this file's Prometheus: each series' labels and value. */
async function query(expr: string): Promise<{ labels: Record<string, string>; value: number }[]> {
  const response = await fetch(`${prometheusUrl}/api/v1/query`, {
    method: "POST",
    body: new URLSearchParams({ query: expr }),
  });
  const parsed = QueryResponse.parse(await response.json());
  if (parsed.status === "error") throw new Error(`${parsed.errorType}: ${parsed.error}\n${expr}`);
  return parsed.data.result.map((r) => ({ labels: r.metric, value: Number(r.value[1]) }));
}

beforeAll(async () => {
  system = await createTestNamespace(core, "rn-helm-system");
  work = await createTestNamespace(core, "rn-helm-work");
  // The cluster's setup applied crds/ before the chart existed, as a user who installed the CRDs by
  // hand has; Helm adopts such an object once it carries the release's ownership metadata.
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
  if (prometheus) await stopProcess(prometheus);
  if (workDir) rmSync(workDir, { recursive: true, force: true });
  if (installed) await helm(["uninstall", release, "-n", system, "--wait"]);
  if (work) await deleteTestNamespace(core, work);
  if (system) await deleteTestNamespace(core, system);
});

describe("a Helm release of the chart on the real node", () => {
  it("installs the controller, which elects a leader and runs Playbooks applied afterwards", async () => {
    // A failed or timed-out install may still have made the release: afterAll uninstalls it.
    installed = true;
    // The chart's leader election settings (15s Lease), as users run it.
    const install = await timed("helm install --wait", () =>
      helm([
        "install",
        release,
        chart,
        "-n",
        system,
        "--wait",
        "--timeout=5m",
        ...[...imageValues, `config.namespaces={${work}}`].flatMap((set) => ["--set", set]),
      ]),
    );
    expect(install.stderr + (install.code === 0 ? "" : await diagnose())).toBe("");
    expect(install.code).toBe(0);
    expect(install.stdout).toMatch(/kubectl get pb -w/);
    await rolledOut();

    const holder = await timed("a leader", leaseHolder);
    expect(running(await controllerPods()).map((pod) => pod.metadata?.name)).toContain(holder);
    // Both replicas run (the standby ready too) on the real node, and neither has restarted.
    const pods = await controllerPods();
    expect(pods).toHaveLength(2);
    for (const pod of pods) {
      expect(pod.spec?.nodeName).toBe("real-node");
      expect(pod.spec?.containers[0]?.image).toBe(inject("runnerImage"));
      expect(pod.status?.phase).toBe("Running");
      const status = pod.status?.containerStatuses?.[0];
      expect(status?.ready).toBe(true);
      expect(status?.restartCount).toBe(0);
      expect(status?.containerID).toMatch(/^containerd:\/\//);
    }

    await kubectl(["-n", work, "apply", "-f", path.join(repoRoot(), "examples", "hello.yaml")]);
    const hello = await timed("hello.yaml to Succeeded", () => waitForFinished(work, "hello", 120_000));
    expect(condition(hello, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const { stdout } = await kubectl(["-n", work, "get", "pb"]);
    expect(stdout).toMatch(/hello\s+Succeeded\s+Succeeded\s/);
    // The runner pod ran the chart's own image (config.runnerImage left empty).
    const runner = await core.readNamespacedPod({ namespace: work, name: "hello-1" });
    expect(runner.spec?.containers[0]?.image).toBe(inject("runnerImage"));
  }, 420_000);

  it("is scraped by Prometheus through the API server, each endpoint of the metrics Service through pods/proxy", async () => {
    // Prometheus outside the cluster with the admin's client certificate, scraping each endpoint
    // of the metrics Service at the API server, which proxies to the pod from the node's network.
    // Debian's Prometheus is built without Kubernetes discovery, so this file does its part: it
    // lists the Service's EndpointSlices and writes one target a pod for Prometheus' file
    // discovery, as kubernetes_sd_configs (role endpointslice) with a relabelling would. The
    // address is the API server's whatever the endpoint says: nothing here dials a pod IP.
    const user = kubeConfig.getCurrentUser();
    const tls = {
      ca_file: kubeConfig.getCurrentCluster()?.caFile,
      cert_file: user?.certFile,
      key_file: user?.keyFile,
    };
    expect(Object.values(tls).every((file) => typeof file === "string" && file !== "")).toBe(true);
    workDir = mkdtempSync(path.join(tmpdir(), "pb-rn-prometheus-"));
    targetsFile = path.join(workDir, "targets.json");
    expect(await writeTargets()).toHaveLength(2);
    const configFile = path.join(workDir, "prometheus.yml");
    writeFileSync(
      configFile,
      JSON.stringify({
        global: { scrape_interval: "1s", evaluation_interval: "1s" },
        scrape_configs: [
          {
            job_name: "playbook-controller",
            // The metrics' own `namespace` (the Playbook's) wins over any target label.
            honor_labels: true,
            scheme: "https",
            tls_config: tls,
            file_sd_configs: [{ files: [targetsFile], refresh_interval: "1s" }],
          },
        ],
      }),
    );
    const port = await freePort();
    prometheusUrl = `http://127.0.0.1:${port}`;
    const logFile = path.join(workDir, "prometheus.log");
    const started = startProcess(
      "prometheus",
      process.env.PROMETHEUS ?? "prometheus",
      [
        `--config.file=${configFile}`,
        `--storage.tsdb.path=${path.join(workDir, "data")}`,
        `--web.listen-address=127.0.0.1:${port}`,
        "--log.level=warn",
      ],
      { logFile },
    );
    prometheus = started;
    let exited = false;
    void started.exited.then(() => (exited = true));
    const abortIf = () => (exited ? `Prometheus exited: ${logTail(logFile)}` : undefined);
    await timed("Prometheus ready", () =>
      waitFor(
        "Prometheus to be ready",
        async () => ((await fetch(`${prometheusUrl}/-/ready`)).ok ? true : undefined),
        { timeoutMs: 30_000, intervalMs: 200, abortIf },
      ),
    );

    const pods = running(await controllerPods()).map((pod) => pod.metadata?.name ?? "");
    const up = await timed("both pods scraped", () =>
      waitFor(
        "both controller pods to be scraped",
        async () => {
          const series = await query('up{job="playbook-controller"}');
          return series.length === 2 && series.every((s) => s.value === 1) ? series : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 500, abortIf },
      ),
    );
    expect(up.map((s) => s.labels.pod).sort()).toEqual([...pods].sort());
    for (const s of up) expect(s.labels.instance).toBe(apiServer.host);

    // The leader counted the run this file made. It exports a series for every reason in each
    // watched namespace from the start (0 until a run ends so); the standby exports none.
    const holder = await leaseHolder();
    const runs = await timed("the run in playbook_runs_total", () =>
      waitFor(
        "playbook_runs_total to hold the run",
        async () => {
          const series = await query(`playbook_runs_total{namespace="${work}"}`);
          return series.some((s) => s.value > 0) ? series : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 500, abortIf },
      ),
    );
    expect(new Set(runs.map((s) => s.labels.pod))).toEqual(new Set([holder]));
    expect(runs.map((s) => s.labels.reason)).toContain("TaskTimeout");
    expect(
      runs
        .filter((s) => s.value !== 0)
        .map((s) => ({ pod: s.labels.pod, reason: s.labels.reason, value: s.value })),
    ).toEqual([{ pod: holder, reason: "Succeeded", value: 1 }]);
    // One leader among the two.
    const leaders = await query("playbook_leader");
    expect(leaders.map((s) => `${s.labels.pod} ${s.value}`).sort()).toEqual(
      pods.map((pod) => `${pod} ${pod === holder ? 1 : 0}`).sort(),
    );
  }, 180_000);

  it("rolls the Deployment on helm upgrade with changed values", async () => {
    const before = await apps.readNamespacedDeployment({ namespace: system, name: fullname });
    const oldPods = (await controllerPods()).map((pod) => pod.metadata?.name ?? "");
    const upgrade = await timed("helm upgrade --wait", () =>
      helm([
        "upgrade",
        release,
        chart,
        "-n",
        system,
        "--reuse-values",
        "--wait",
        "--timeout=5m",
        "--set",
        "config.logLevel=debug",
        "--set",
        "config.logFormat=text",
      ]),
    );
    expect(upgrade.stderr + (upgrade.code === 0 ? "" : await diagnose())).toBe("");
    expect(upgrade.code).toBe(0);
    await rolledOut();
    const after = await apps.readNamespacedDeployment({ namespace: system, name: fullname });
    expect(after.metadata?.generation).toBeGreaterThan(before.metadata?.generation ?? 0);
    const args = after.spec?.template.spec?.containers[0]?.args ?? [];
    expect(args).toContain("--log-level=debug");
    expect(args).toContain("--log-format=text");
    const live = running(await controllerPods());
    expect(live.length).toBeGreaterThan(0);
    for (const pod of live) {
      expect(oldPods).not.toContain(pod.metadata?.name);
      expect(pod.spec?.containers[0]?.args).toContain("--log-level=debug");
    }
    // The new pods still run Playbooks.
    await kubectl(["-n", work, "apply", "-f", path.join(repoRoot(), "examples", "stall.yaml")]);
    const stalled = await timed("stall.yaml to StallLimit", () => waitForFinished(work, "stall", 120_000));
    expect(condition(stalled, "Succeeded")?.reason).toBe("StallLimit");
    // And Prometheus, told the Service's endpoints anew, scrapes them: the new leader counted the run.
    const holder = await leaseHolder();
    expect(await writeTargets()).toEqual(expect.arrayContaining([holder]));
    const stalls = await timed("the new leader's run in playbook_runs_total", () =>
      waitFor(
        "playbook_runs_total of the new leader",
        async () => {
          const series = await query(`playbook_runs_total{namespace="${work}"} > 0`);
          return series.length > 0 ? series : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 500 },
      ),
    );
    // The new leader counts what it ended itself: the run before the upgrade is not counted again.
    expect(stalls.map((s) => ({ pod: s.labels.pod, reason: s.labels.reason, value: s.value }))).toEqual([
      { pod: holder, reason: "StallLimit", value: 1 },
    ]);
    expect(oldPods).not.toContain(holder);
  }, 420_000);

  it("leaves the CRDs and the Playbooks on helm uninstall", async () => {
    const uninstall = await timed("helm uninstall --wait", () =>
      helm(["uninstall", release, "-n", system, "--wait"]),
    );
    expect(uninstall.code, uninstall.stderr).toBe(0);
    installed = false;
    expect(uninstall.stdout + uninstall.stderr).toMatch(/kept due to the resource policy/);
    await waitFor(
      "the controller's pods to be gone",
      async () => ((await controllerPods()).length === 0 ? true : undefined),
      { timeoutMs: 120_000, intervalMs: 500 },
    );
    const crds = await kubectlResult(["get", "crd", ...CRDS]);
    expect(crds.code).toBe(0);
    const { stdout } = await kubectl(["-n", work, "get", "pb", "-o", "name"]);
    expect(stdout.split("\n").filter(Boolean).sort()).toEqual([
      "playbook.playbook.dev/hello",
      "playbook.playbook.dev/stall",
    ]);
  }, 180_000);
});
