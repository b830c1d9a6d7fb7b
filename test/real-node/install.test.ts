// The install path of the README, end to end on a real node that has never held the project's
// image: the image (built when this checkout's is not) pushed to a registry inside the dev
// cluster's own network (Debian's distribution registry, beside the node's containerd, on
// 127.0.0.1 there), the real kubelet pulling it from there blob by blob, `helm install` of the
// chart with the image values a user sets for their own registry, the controller's pods Ready
// under the chart's own probes and security context, a Playbook ending TaskTimeout, and `helm
// uninstall` keeping the CRDs and the Playbooks.
// The file starts a cluster of its own (control plane and real node, only the pause and busybox
// images imported) beside the real-node project's shared one, whose node has the project's image
// imported for the other files: a node holding the image's blobs resolves the tag at the registry
// and fetches nothing else, and containerd 1.6's CRI did not see that image again once it had
// been removed and imported anew (pods then failed ErrImagePull).
// Each step is timed; the times are printed at the end (`[install]` lines on stderr).
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import {
  CoreV1Api,
  type CoreV1Event,
  CustomObjectsApi,
  KubeConfig,
  type V1Pod,
} from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { containerEngine } from "../harness/container-engine.js";
import { type DevCluster, startDevCluster } from "../harness/dev-cluster.js";
import { buildImage, imageName, imageStaleness } from "../harness/image.js";
import { runClusterTool, waitFor } from "../harness/processes.js";
import { type NodeRegistry, nodeHasContent, startNodeRegistry } from "../harness/real-node/registry.js";

const chart = path.join(repoRoot(), "charts", "playbook-controller");
const release = "pbc";
const CRDS = ["playbooks.playbook.dev", "playbookpolicies.playbook.dev"];
const { version } = z
  .object({ version: z.string() })
  .parse(JSON.parse(readFileSync(path.join(repoRoot(), "package.json"), "utf8")));

// A folder named like the cluster tests' (test-<pid>): if this worker dies, the next run sweeps it.
const stateDir = path.join(repoRoot(), ".cluster", `test-${process.pid}`);
const engine = containerEngine();
let cluster: DevCluster | undefined;
let core: CoreV1Api;
let custom: CustomObjectsApi;

/** A command of the cluster's tools folder against this file's cluster: exit code and both streams. */
function tool(name: "kubectl" | "helm", args: string[]) {
  return runClusterTool(path.join(cluster?.state.binDir ?? "", name), args, cluster?.state.kubeconfig);
}
const helm = (args: string[]) => tool("helm", args);
const kubectlResult = (args: string[]) => tool("kubectl", args);
async function kubectl(args: string[]) {
  const result = await tool("kubectl", args);
  if (result.code !== 0) throw new Error(`kubectl ${args.join(" ")} failed: ${result.stderr}`);
  return result;
}

type Condition = { type: string; status: string; reason?: string };
const condition = (status: PlaybookStatus | undefined, type: string): Condition | undefined =>
  (status?.conditions as Condition[] | undefined)?.find((c) => c.type === type);

/** The Playbook's status once its Succeeded condition is True or False (the run is over). */
async function waitForFinished(namespace: string, name: string, timeoutMs: number): Promise<PlaybookStatus> {
  return waitFor(
    `Playbook ${namespace}/${name} to finish`,
    async () => {
      const playbook = (await custom.getNamespacedCustomObject({
        group: "playbook.dev",
        version: "v1alpha1",
        namespace,
        plural: "playbooks",
        name,
      })) as { status?: PlaybookStatus };
      const succeeded = condition(playbook.status, "Succeeded");
      return succeeded && succeeded.status !== "Unknown" ? playbook.status : undefined;
    },
    { timeoutMs, intervalMs: 250 },
  );
}
let registry: NodeRegistry | undefined;
let system: string;
let work: string;
let installed = false;
let digest = "";

const timings: { step: string; ms: number }[] = [];
async function timed<T>(step: string, action: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  try {
    return await action();
  } finally {
    timings.push({ step, ms: Date.now() - t0 });
    process.stderr.write(`[install] ${step}: ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
  }
}
const log = (message: string) => process.stderr.write(`[install] ${message}\n`);

const image = () => `${registry?.host}/playbook-controller:${version}`;

async function controllerPods(): Promise<V1Pod[]> {
  const pods = await core.listNamespacedPod({
    namespace: system,
    labelSelector: `app.kubernetes.io/instance=${release},app.kubernetes.io/name=playbook-controller`,
  });
  return pods.items;
}

async function eventsOf(namespace: string, pod: string): Promise<CoreV1Event[]> {
  const events = await core.listNamespacedEvent({
    namespace,
    fieldSelector: `involvedObject.kind=Pod,involvedObject.name=${pod}`,
  });
  return events.items;
}

/** What a user looks at when the install does not come up: pods, their events, the controller's log. */
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

beforeAll(async () => {
  const stale = await imageStaleness(engine);
  if (stale) await timed(`image:build (${stale})`, () => buildImage(engine, { log }));
  cluster = await timed("start a dev cluster whose real node has no project image", () =>
    startDevCluster({ stateDir, daemon: false, node: "real", images: [], log: () => {} }),
  );
  expect(cluster.realNode?.images.some((name) => name.includes("playbook-controller"))).toBe(false);
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(cluster.state.kubeconfig);
  core = kubeConfig.makeApiClient(CoreV1Api);
  custom = kubeConfig.makeApiClient(CustomObjectsApi);
  registry = await timed("start the registry in the node's network", () =>
    startNodeRegistry({ stateDir, log }),
  );
  system = await createTestNamespace(core, "pbc-system");
  work = await createTestNamespace(core, "install-work");
  // The dev cluster applied crds/ already, as a user who installed the CRDs by hand has; the
  // release leaves them out (crds.install=false), as the README says for that case.
}, 1_200_000);

afterAll(async () => {
  if (installed) await helm(["uninstall", release, "-n", system, "--wait"]);
  if (work) await deleteTestNamespace(core, work).catch(() => {});
  if (system) await deleteTestNamespace(core, system).catch(() => {});
  await registry?.stop();
  await cluster?.stop();
  await rm(stateDir, { recursive: true, force: true });
  if (timings.length > 0)
    log(
      `timings: ${timings.map((t) => `${t.step} ${(t.ms / 1000).toFixed(1)} s`).join("; ")}; total ${(
        timings.reduce((sum, t) => sum + t.ms, 0) / 1000
      ).toFixed(1)} s`,
    );
});

describe("install on the real node from a registry in the cluster's network", () => {
  it("pushes the project's image to the registry", async () => {
    digest = await timed(`podman push ${imageName()} to the registry`, () =>
      // biome-ignore lint/style/noNonNullAssertion: started in beforeAll, which fails otherwise
      registry!.push(`localhost/${imageName()}`, "playbook-controller", version),
    );
    expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    // The node has nothing of it: the install below must pull every blob from the registry.
    expect(await nodeHasContent(stateDir, digest)).toBe(false);
  }, 600_000);

  it("helm install with the registry's image: the kubelet pulls it from there and the pods become Ready under the chart's probes", async () => {
    // A failed or timed-out install may still have made the release: afterAll uninstalls it.
    installed = true;
    const install = await timed("helm install (until the Deployment is available)", () =>
      helm([
        "install",
        release,
        chart,
        "-n",
        system,
        "--set",
        `image.registry=${registry?.host}`,
        "--set",
        "image.repository=playbook-controller",
        "--set",
        `image.tag=${version}`,
        "--set",
        "crds.install=false",
        "--set",
        `config.namespaces={${work}}`,
        "--wait",
        "--timeout=8m",
      ]),
    );
    expect(install.stderr + (install.code === 0 ? "" : await diagnose())).toBe("");
    expect(install.code).toBe(0);

    const pods = await controllerPods();
    expect(pods).toHaveLength(2);
    for (const pod of pods) {
      const name = pod.metadata?.name ?? "";
      const container = pod.spec?.containers[0];
      // The chart's image from the registry, its probes and its security context, unchanged.
      expect(container?.image).toBe(image());
      expect(container?.command).toBeUndefined();
      expect(container?.args?.[0]).toBe("controller");
      expect(container?.readinessProbe?.httpGet?.path).toBe("/readyz");
      expect(container?.livenessProbe?.httpGet?.path).toBe("/healthz");
      expect(container?.securityContext).toMatchObject({
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
      });
      expect(pod.spec?.nodeName).toBe("real-node");
      const status = pod.status?.containerStatuses?.[0];
      expect(status?.ready, name).toBe(true);
      expect(status?.restartCount, name).toBe(0);
      expect(status?.containerID).toMatch(/^containerd:\/\//);
      // The very image pushed: the kubelet reports the registry's manifest digest.
      expect(status?.imageID).toBe(`${registry?.host}/playbook-controller@${digest}`);
    }
    // Pulled, not imported: the kubelet's events say so for the first pod to start.
    const pulled = (await Promise.all(pods.map((pod) => eventsOf(system, pod.metadata?.name ?? "")))).flat();
    expect(pulled.map((e) => `${e.reason}: ${e.message}`)).toEqual(
      expect.arrayContaining([
        `Pulling: Pulling image "${image()}"`,
        expect.stringMatching(
          new RegExp(`^Pulled: Successfully pulled image "${image().replaceAll(".", "\\.")}"`),
        ),
      ]),
    );
    for (const event of pulled.filter((e) => e.reason === "Pulled")) log(`kubelet: ${event.message}`);
    // And the registry served it to containerd: the manifest and the blobs (config and layers).
    const served = readFileSync(registry?.logFile ?? "", "utf8")
      .split("\n")
      .filter((line) => /^\S+ - - \[/.test(line) && /"containerd\//.test(line))
      .map((line) => /"(GET|HEAD) (\/v2\/\S+) HTTP\/1\.1" (\d+)/.exec(line)?.slice(1, 4).join(" ") ?? line);
    expect(served).toEqual(
      expect.arrayContaining([
        expect.stringMatching(
          new RegExp(
            `^GET /v2/playbook-controller/manifests/(${digest}|${version.replaceAll(".", "\\.")}) 200$`,
          ),
        ),
        expect.stringMatching(/^GET \/v2\/playbook-controller\/blobs\/sha256:[0-9a-f]{64} 200$/),
      ]),
    );
    expect(await nodeHasContent(stateDir, digest)).toBe(true);
  }, 900_000);

  it("serves /metrics through both commands the release's NOTES print: port-forward to the Service, and the API server's proxy", async () => {
    const notes = await helm(["get", "notes", release, "-n", system]);
    expect(notes.code, notes.stderr).toBe(0);
    const forward = /^ *kubectl (-n \S+ port-forward svc\/\S+) (\d+)$/m.exec(notes.stdout);
    const raw = /^ *kubectl get --raw (\S+)$/m.exec(notes.stdout);
    expect({ forward: forward?.[0].trim(), raw: raw?.[0].trim() }).toEqual({
      forward: `kubectl -n ${system} port-forward svc/${release}-playbook-controller-metrics 8080`,
      raw: `kubectl get --raw /api/v1/namespaces/${system}/services/${release}-playbook-controller-metrics:metrics/proxy/metrics`,
    });
    expect(notes.stdout).toContain("curl -s localhost:8080/metrics | grep ^playbook_\n");
    const series = (text: string) => text.split("\n").filter((line) => line.startsWith("playbook_"));

    // The printed port-forward, with `:8080` for `8080`: the same forward from a free local port,
    // as 8080 may be taken on a shared machine.
    let child: ChildProcess | undefined;
    try {
      const viaForward = await timed(
        "NOTES: kubectl port-forward svc/...-metrics, then GET /metrics",
        async () => {
          const args = `${forward?.[1]} :${forward?.[2]}`.split(" ");
          const started = spawn(path.join(cluster?.state.binDir ?? "", "kubectl"), args, {
            env: { ...process.env, KUBECONFIG: cluster?.state.kubeconfig },
            stdio: ["ignore", "pipe", "pipe"],
          });
          child = started;
          let output = "";
          started.stdout?.on("data", (chunk: Buffer) => {
            output += chunk.toString();
          });
          started.stderr?.on("data", (chunk: Buffer) => {
            output += chunk.toString();
          });
          const port = await waitFor(
            "kubectl port-forward to say where it listens",
            async () => /Forwarding from 127\.0\.0\.1:(\d+) -> 8080/.exec(output)?.[1],
            {
              timeoutMs: 30_000,
              abortIf: () => (started.exitCode !== null ? `port-forward exited: ${output}` : undefined),
            },
          );
          const response = await fetch(`http://127.0.0.1:${port}/metrics`);
          expect(response.status).toBe(200);
          return response.text();
        },
      );
      expect(series(viaForward)).toEqual(
        expect.arrayContaining([expect.stringMatching(/^playbook_ready 1$/)]),
      );
    } finally {
      child?.kill();
    }

    const viaProxy = await timed(
      "NOTES: kubectl get --raw .../services/...-metrics:metrics/proxy/metrics",
      () => kubectl(["get", "--raw", raw?.[1] ?? ""]),
    );
    expect(series(viaProxy.stdout)).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^playbook_ready 1$/),
        expect.stringMatching(/^playbook_leader [01]$/),
      ]),
    );
  }, 120_000);

  it("runs a Playbook applied afterwards to TaskTimeout, in a runner pod of the same image", async () => {
    await timed("kubectl apply examples/task-timeout.yaml until Failed TaskTimeout", async () => {
      await kubectl(["-n", work, "apply", "-f", path.join(repoRoot(), "examples", "task-timeout.yaml")]);
      const timedOut = await waitForFinished(work, "task-timeout", 180_000);
      expect(condition(timedOut, "Succeeded")).toMatchObject({ status: "False", reason: "TaskTimeout" });
      expect(condition(timedOut, "LimitExceeded")).toMatchObject({ status: "True", reason: "TaskTimeout" });
    });
    const { stdout } = await kubectl(["-n", work, "get", "pb"]);
    expect(stdout).toMatch(/task-timeout\s+Failed\s+TaskTimeout\s+migrate/);
    const runner = await core.readNamespacedPod({ namespace: work, name: "task-timeout-1" });
    expect(runner.spec?.containers[0]?.image).toBe(image());
  }, 300_000);

  it("helm uninstall removes the controller and keeps both CRDs and the Playbooks", async () => {
    const uninstall = await timed("helm uninstall", () =>
      helm(["uninstall", release, "-n", system, "--wait"]),
    );
    expect(uninstall.code, uninstall.stderr).toBe(0);
    installed = false;
    await waitFor(
      "the controller's pods to be gone",
      async () => ((await controllerPods()).length === 0 ? true : undefined),
      { timeoutMs: 120_000, intervalMs: 500 },
    );
    for (const crd of CRDS) await kubectl(["get", "crd", crd]);
    const { stdout } = await kubectl(["-n", work, "get", "pb", "task-timeout", "-o", "name"]);
    expect(stdout.trim()).toBe("playbook.playbook.dev/task-timeout");
  }, 300_000);
});
