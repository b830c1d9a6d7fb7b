// `playbook controller` run from the image against a dev cluster's API server: it serves /readyz
// and /metrics on 127.0.0.1 and reconciles a Playbook to its end.
//
// Host networking, and why: the dev cluster's API server listens on 127.0.0.1 only. A container
// in a network namespace of its own reaches the host's loopback only through a bridge or NAT on
// the host (podman's default network puts a bridge with a private range there), and every
// connection here must stay on loopback. With host networking the container dials the API server
// at 127.0.0.1 as the kubeconfig says (the certificate names 127.0.0.1, nothing is rewritten) and
// its /metrics port is a port on 127.0.0.1; the same holds on a Linux Docker engine.
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { CoreV1Api, CustomObjectsApi, KubeConfig } from "@kubernetes/client-node";
import type { StartedTestContainer } from "testcontainers";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Playbook } from "../../src/api/playbook.js";
import { repoRoot } from "../harness/binaries.js";
import { createTestNamespace } from "../harness/cluster-test.js";
import { type DevCluster, startDevCluster } from "../harness/dev-cluster.js";
import { keepOrRemoveClusterState, suiteOutcome, whyKeepLogs } from "../harness/log-retention.js";
import { freePort, waitFor } from "../harness/processes.js";
import { reportFor, reportPod, scheduledPod, startPod } from "../harness/scripted-node.js";
import { removeContainer, startImageContainer, TINI } from "./support.js";

const run = promisify(execFile);

// The image the controller names in its pods; on the scripted node the test writes the pod's life
// (the runner in the image is tested in test/image/examples.test.ts and on the real node).
const RUNNER_IMAGE = "ghcr.io/playbook-controller/playbook-controller:test";

let cluster: DevCluster;
let container: StartedTestContainer | undefined;
let port: number;
let namespace: string;
let kubectl: (args: string[]) => Promise<string>;
// A folder named like the cluster tests' (test-<pid>): if this worker dies, the next cluster test
// run sweeps what it left.
const stateDir = path.join(repoRoot(), ".cluster", `test-${process.pid}`);
const logs: string[] = [];

beforeAll(async () => {
  cluster = await startDevCluster({ stateDir, daemon: false, log: (m) => logs.push(m), node: "scripted" });
  const env = { ...process.env, KUBECONFIG: cluster.state.kubeconfig };
  kubectl = async (args) =>
    (await run(path.join(cluster.state.binDir, "kubectl"), args, { env, maxBuffer: 1 << 22 })).stdout;
  // Certificates inline: the container reads one file, as a user that cannot read the pki folder.
  const kubeconfig = await kubectl(["config", "view", "--raw", "--flatten"]);
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(cluster.state.kubeconfig);
  namespace = await createTestNamespace(kubeConfig.makeApiClient(CoreV1Api), "image-controller");
  port = await freePort();
  container = await startImageContainer((c) =>
    c
      .withNetworkMode("host")
      .withCopyContentToContainer([{ content: kubeconfig, target: "/home/kubeconfig", mode: 0o644 }])
      .withEnvironment({ KUBECONFIG: "/home/kubeconfig" })
      // The image's own entrypoint (`tini -- playbook`), with the subcommand as arguments, as the
      // chart's Deployment runs it.
      .withEntrypoint([TINI, "--", "playbook"])
      .withCommand([
        "controller",
        `--metrics-address=127.0.0.1:${port}`,
        `--namespaces=${namespace}`,
        `--leader-election-namespace=${namespace}`,
        `--runner-image=${RUNNER_IMAGE}`,
        "--default-kill-grace=2s",
      ]),
  );
});

// vitest passes the file's suite second; its first argument must be a destructuring pattern.
// biome-ignore lint/correctness/noEmptyPattern: no fixture is used here
afterAll(async ({}, suite) => {
  // The container first, so the controller does not outlive its API server.
  if (container) await removeContainer(container);
  await cluster?.stop();
  // Its logs stay (and are named) when a test failed.
  await keepOrRemoveClusterState(stateDir, whyKeepLogs(suiteOutcome(suite)), (m) =>
    process.stderr.write(`${m}\n`),
  );
});

async function get(pathname: string): Promise<{ status: number; body: string }> {
  const response = await fetch(`http://127.0.0.1:${port}${pathname}`);
  return { status: response.status, body: await response.text() };
}

/** The controller's own log, for failure messages. */
async function controllerLog(): Promise<string> {
  if (!container) return "";
  const stream = await container.logs();
  let text = "";
  await new Promise<void>((resolve) => {
    stream.on("data", (chunk: Buffer) => {
      text += chunk.toString();
    });
    stream.on("end", resolve);
    // A running container's log stream follows: what arrived within a moment is enough.
    setTimeout(resolve, 500);
  });
  return text.split("\n").slice(-30).join("\n");
}

describe("playbook controller in the image", () => {
  it("serves /readyz and /metrics on 127.0.0.1 once its caches are synced with the API server", async () => {
    const ready = await waitFor(
      "/readyz to answer 200",
      async () => {
        const answer = await get("/readyz");
        return answer.status === 200 ? answer : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    ).catch(async (error: unknown) => {
      throw new Error(`${error}\ncontroller log:\n${await controllerLog()}`);
    });
    expect(ready.status).toBe(200);
    const metrics = await get("/metrics");
    expect(metrics.status).toBe(200);
    expect(metrics.body).toMatch(/^playbook_workqueue_depth \d+/m);
    expect(metrics.body).toMatch(/^process_resident_memory_bytes \d+/m);
  });

  it("runs examples/hello.yaml to Succeeded and counts it", async () => {
    await kubectl(["-n", namespace, "apply", "-f", path.join(repoRoot(), "examples", "hello.yaml")]);
    const core = (() => {
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromFile(cluster.state.kubeconfig);
      return kubeConfig.makeApiClient(CoreV1Api);
    })();
    // The controller in the image made the pod; it runs and its runner reports success.
    const pod = await scheduledPod(core, namespace, "hello-1", 60_000);
    await startPod(core, pod);
    await reportPod(core, pod, reportFor(pod, { reason: "Succeeded" }));
    const custom = (() => {
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromFile(cluster.state.kubeconfig);
      return kubeConfig.makeApiClient(CustomObjectsApi);
    })();
    const playbook = await waitFor(
      "hello to finish",
      async () => {
        const object = (await custom.getNamespacedCustomObject({
          group: "playbook.dev",
          version: "v1alpha1",
          namespace,
          plural: "playbooks",
          name: "hello",
        })) as Playbook;
        return object.status?.completionTime ? object : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500 },
    ).catch(async (error: unknown) => {
      throw new Error(`${error}\ncontroller log:\n${await controllerLog()}`);
    });
    expect(playbook.status?.conditions?.find((c) => c.type === "Succeeded")?.reason).toBe("Succeeded");
    const metrics = await get("/metrics");
    expect(metrics.body).toContain(`playbook_runs_total{namespace="${namespace}",reason="Succeeded"} 1`);
  });
});
