// What the real kubelet does to pods that the controller relies on, seen from the API as a user
// would: the activeDeadlineSeconds backstop, termination messages, the SIGTERM grace period, a
// shared PID namespace with pause as PID 1, and the `restricted` security context enforced.
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kubectl } from "../controller/support.js";
import {
  clusterClients,
  createTestNamespace,
  deleteTestNamespace,
  waitForPod,
  waitForPodGone,
} from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";
import { BUSYBOX_IMAGE } from "../harness/real-node/images.js";

const { core } = clusterClients();
let namespace: string;
let restrictedNamespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-kubelet");
  restrictedNamespace = await createTestNamespace(core, "rn-restricted", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
});
afterAll(async () => {
  await deleteTestNamespace(core, namespace);
  await deleteTestNamespace(core, restrictedNamespace);
});

const RESTRICTED_CONTAINER = {
  allowPrivilegeEscalation: false,
  capabilities: { drop: ["ALL"] },
  runAsNonRoot: true,
  runAsUser: 65532,
  seccompProfile: { type: "RuntimeDefault" },
  readOnlyRootFilesystem: true,
};

function pod(name: string, script: string, spec: Record<string, unknown> = {}, container = {}): V1Pod {
  return {
    metadata: { name },
    spec: {
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      containers: [
        {
          name: "main",
          image: BUSYBOX_IMAGE,
          imagePullPolicy: "Never",
          command: ["sh", "-c", script],
          ...container,
        },
      ],
      ...spec,
    },
  };
}

const terminated = (p: V1Pod) => p.status?.containerStatuses?.[0]?.state?.terminated;
const ended = (p: V1Pod) => p.status?.phase === "Succeeded" || p.status?.phase === "Failed";

async function logs(ns: string, name: string): Promise<string> {
  return (await kubectl(["-n", ns, "logs", name])).stdout;
}

describe("the real kubelet", () => {
  it("runs pods on the node real-node with an address on the dev cluster's pod bridge", async () => {
    await core.createNamespacedPod({ namespace, body: pod("placed", "echo placed") });
    const done = await waitForPod(core, namespace, "placed", "to end", ended);
    expect(done.spec?.nodeName).toBe("real-node");
    expect(done.status?.phase).toBe("Succeeded");
    expect(done.status?.podIP).toMatch(/^10\.88\./);
    expect(done.status?.hostIP).toBe("127.0.0.1");
    expect(await logs(namespace, "placed")).toBe("placed\n");
  });

  it("runs kubectl exec in a running container (the API server to the kubelet to containerd, all on 127.0.0.1)", async () => {
    await core.createNamespacedPod({
      namespace,
      body: pod("execd", "exec sleep 300", { terminationGracePeriodSeconds: 0 }),
    });
    await waitForPod(core, namespace, "execd", "to run", (p) => p.status?.phase === "Running");
    const { stdout } = await kubectl([
      "-n",
      namespace,
      "exec",
      "execd",
      "--",
      "sh",
      "-c",
      "echo from $(hostname)",
    ]);
    expect(stdout).toBe("from execd\n");
    await core.deleteNamespacedPod({ namespace, name: "execd" });
  });

  it("ends a pod past activeDeadlineSeconds as DeadlineExceeded and kills its container", async () => {
    await core.createNamespacedPod({
      namespace,
      body: pod("deadline", "echo started; exec sleep 300", {
        activeDeadlineSeconds: 2,
        terminationGracePeriodSeconds: 1,
      }),
    });
    const done = await waitForPod(core, namespace, "deadline", "to fail", ended);
    expect(done.status).toMatchObject({
      phase: "Failed",
      reason: "DeadlineExceeded",
      message: "Pod was active on the node longer than the specified deadline",
    });
    const container = await waitForPod(
      core,
      namespace,
      "deadline",
      "to report its container",
      (p) => !!terminated(p),
    );
    // sleep ignores nothing: SIGTERM ends it (143), or SIGKILL after the grace (137).
    expect([137, 143]).toContain(terminated(container)?.exitCode);
  });

  it("reports the termination message file, and the log tail with FallbackToLogsOnError", async () => {
    await core.createNamespacedPod({
      namespace,
      body: pod("message", "echo out; printf 'the report' > /dev/termination-log; exit 3"),
    });
    await core.createNamespacedPod({
      namespace,
      body: pod(
        "fallback",
        "echo first line; echo last line; exit 4",
        {},
        {
          terminationMessagePolicy: "FallbackToLogsOnError",
        },
      ),
    });
    const message = await waitForPod(core, namespace, "message", "to end", (p) => !!terminated(p));
    expect(terminated(message)).toMatchObject({ exitCode: 3, reason: "Error", message: "the report" });
    const fallback = await waitForPod(core, namespace, "fallback", "to end", (p) => !!terminated(p));
    expect(terminated(fallback)).toMatchObject({ exitCode: 4, message: "first line\nlast line\n" });
  });

  it("sends SIGTERM on deletion and SIGKILL only after the grace period", async () => {
    // One stops on SIGTERM; the other ignores it and is killed when the 3s grace is over.
    await core.createNamespacedPod({
      namespace,
      body: pod("graceful", "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.1; done", {
        terminationGracePeriodSeconds: 30,
      }),
    });
    await core.createNamespacedPod({
      namespace,
      body: pod("stubborn", "trap '' TERM; echo ready; while :; do sleep 0.1; done", {
        terminationGracePeriodSeconds: 3,
      }),
    });
    for (const name of ["graceful", "stubborn"]) {
      await waitForPod(core, namespace, name, "to run", (p) => p.status?.phase === "Running");
      await waitFor(
        `${name} to print ready`,
        async () => ((await logs(namespace, name)).includes("ready") ? true : undefined),
        { timeoutMs: 30_000, intervalMs: 200 },
      );
    }
    const started = Date.now();
    await core.deleteNamespacedPod({ namespace, name: "graceful" });
    await waitForPodGone(core, namespace, "graceful");
    const gracefulMs = Date.now() - started;
    expect(gracefulMs).toBeLessThan(15_000);

    const stubbornStart = Date.now();
    await core.deleteNamespacedPod({ namespace, name: "stubborn" });
    await waitForPodGone(core, namespace, "stubborn");
    const stubbornMs = Date.now() - stubbornStart;
    expect(stubbornMs).toBeGreaterThanOrEqual(3_000);
    expect(stubbornMs).toBeLessThan(20_000);
  });

  it("gives a pod with shareProcessNamespace the real pause as PID 1, which reaps orphans", async () => {
    // The orphan's parent exits at once; pause must reap it when it ends, leaving no zombie.
    const script =
      "sh -c 'sleep 1 & exit 0'; sleep 2; echo pid1=$(cat /proc/1/cmdline); echo zombies=$(grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l)";
    await core.createNamespacedPod({
      namespace,
      body: pod("shared", script, { shareProcessNamespace: true }),
    });
    await waitForPod(core, namespace, "shared", "to end", ended);
    const output = await logs(namespace, "shared");
    expect(output).toContain("pid1=/pause");
    expect(output).toContain("zombies=0");
  });

  it("enforces the restricted security context: non-root, no capabilities, seccomp, no new privileges, read-only root", async () => {
    const script = [
      "echo uid=$(id -u)",
      "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status",
      "touch /rootfs-write 2>/dev/null && echo root-writable || echo root-read-only",
    ].join("; ");
    await core.createNamespacedPod({
      namespace: restrictedNamespace,
      body: pod("restricted", script, {}, { securityContext: RESTRICTED_CONTAINER }),
    });
    await waitForPod(core, restrictedNamespace, "restricted", "to end", ended);
    const output = await logs(restrictedNamespace, "restricted");
    expect(output).toContain("uid=65532");
    expect(output).toMatch(/CapEff:\s+0000000000000000/);
    expect(output).toMatch(/NoNewPrivs:\s+1/);
    expect(output).toMatch(/Seccomp:\s+2/);
    expect(output).toContain("root-read-only");
  });

  it("refuses to start a runAsNonRoot container whose image runs as root", async () => {
    // Admission cannot know the image's user; the kubelet checks it before starting the container.
    const { runAsUser: _, ...nonRootWithoutUser } = RESTRICTED_CONTAINER;
    await core.createNamespacedPod({
      namespace: restrictedNamespace,
      body: pod("as-root", "echo should not run", {}, { securityContext: nonRootWithoutUser }),
    });
    const refused = await waitForPod(
      core,
      restrictedNamespace,
      "as-root",
      "to be refused",
      (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === "CreateContainerConfigError",
    );
    expect(refused.status?.containerStatuses?.[0]?.state?.waiting?.message).toContain(
      "container has runAsNonRoot and image will run as root",
    );
  });
});
