import { existsSync, readdirSync, readFileSync, readlinkSync, realpathSync } from "node:fs";
import { mkdtemp, readFile } from "node:fs/promises";
import { connect } from "node:net";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { RbacAuthorizationV1Api, type V1Pod, Watch } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { decodeReport } from "../../src/api/report.js";
import { repoRoot } from "../harness/binaries.js";
import {
  clusterClients,
  createTestNamespace,
  deleteTestNamespace,
  losePod,
  marker,
  processesWithMarker,
  processesWorkingUnder,
  waitForPod,
  waitForPodGone,
} from "../harness/cluster-test.js";
import { detectNetworkNamespaces } from "../harness/process-node/network.js";
import { waitFor } from "../harness/processes.js";

const { kubeConfig, core } = clusterClients();
let namespace: string;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "process-node");
});
afterAll(() => deleteTestNamespace(core, namespace));

function shellPod(
  name: string,
  script: string,
  spec: Partial<V1Pod["spec"]> = {},
  args: string[] = [],
): V1Pod {
  return {
    metadata: { name },
    spec: {
      restartPolicy: "Never",
      containers: [
        {
          name: "main",
          image: "ghcr.io/example/shell:1",
          command: ["sh", "-c", script],
          args,
          env: [
            { name: "GREETING", value: "hello" },
            { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
          ],
        },
      ],
      ...spec,
    },
  };
}

const terminated = (pod: V1Pod) => pod.status?.containerStatuses?.[0]?.state?.terminated;
const finished = (pod: V1Pod) => pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed";

describe("the process node", () => {
  it("is scheduled to by the real scheduler, runs the pod and reports exit code and termination message", async () => {
    await core.createNamespacedPod({
      namespace,
      body: shellPod(
        "exits-three",
        'echo "$GREETING from $POD_NAME"; printf "report of %s" "$POD_NAME" > "$PLAYBOOK_TERMINATION_MESSAGE_PATH"; exit 3',
      ),
    });
    const pod = await waitForPod(core, namespace, "exits-three", "to finish", finished);

    expect(pod.spec?.nodeName).toBe("process-node");
    expect(pod.status?.conditions?.find((c) => c.type === "PodScheduled")?.status).toBe("True");
    expect(pod.status?.phase).toBe("Failed");
    expect(pod.status?.startTime).toBeDefined();
    expect(terminated(pod)).toMatchObject({ exitCode: 3, reason: "Error", message: "report of exits-three" });
  });

  it("points an argument naming terminationMessagePath at a writable file", async () => {
    const body = shellPod("message-arg", 'printf "all done" > "$1"', {}, ["sh", "/dev/termination-log"]);
    await core.createNamespacedPod({ namespace, body });
    const pod = await waitForPod(core, namespace, "message-arg", "to finish", finished);
    expect(pod.status?.phase).toBe("Succeeded");
    expect(terminated(pod)).toMatchObject({ exitCode: 0, reason: "Completed", message: "all done" });
  });

  it("falls back to the log tail for FallbackToLogsOnError when the message file is empty", async () => {
    const body = shellPod("falls-back", 'echo "first line"; echo "disk full" >&2; exit 1');
    const container = body.spec?.containers[0];
    if (container) container.terminationMessagePolicy = "FallbackToLogsOnError";
    await core.createNamespacedPod({ namespace, body });
    const pod = await waitForPod(core, namespace, "falls-back", "to finish", finished);
    expect(terminated(pod)).toMatchObject({
      exitCode: 1,
      reason: "Error",
      message: "first line\ndisk full\n",
    });
  });

  it("fails a pod that runs past activeDeadlineSeconds with DeadlineExceeded and kills its container", async () => {
    const tag = marker();
    await core.createNamespacedPod({
      namespace,
      body: shellPod("overruns", `sh -c 'sleep 300' ${tag} & sleep 300`, {
        activeDeadlineSeconds: 2,
        terminationGracePeriodSeconds: 1,
      }),
    });
    const pod = await waitForPod(
      core,
      namespace,
      "overruns",
      "to be killed",
      (p) => terminated(p) !== undefined,
    );

    expect(pod.status).toMatchObject({
      phase: "Failed",
      reason: "DeadlineExceeded",
      message: "Pod was active on the node longer than the specified deadline",
    });
    const started = new Date(pod.status?.startTime ?? 0).getTime();
    const ended = new Date(terminated(pod)?.finishedAt ?? 0).getTime();
    expect(ended - started).toBeGreaterThanOrEqual(2_000);
    // sh as the container's pid 1 ignores SIGTERM without a trap, as in a container: SIGKILL ends it.
    expect(terminated(pod)).toMatchObject({ exitCode: 137, reason: "Error" });
    expect(processesWithMarker(tag)).toEqual([]);
  });

  it("follows an activeDeadlineSeconds lowered on a running pod: stops it with its grace period and keeps it", async () => {
    const script = `trap 'echo "stopping on TERM"; exit 0' TERM; echo started; while :; do sleep 1; done`;
    await core.createNamespacedPod({
      namespace,
      body: shellPod("lowered", script, { activeDeadlineSeconds: 600, terminationGracePeriodSeconds: 10 }),
    });
    await waitFor(
      "the pod's first line",
      async () =>
        (await core.readNamespacedPodLog({ namespace, name: "lowered" }).catch(() => "")).includes("started")
          ? true
          : undefined,
      { timeoutMs: 60_000 },
    );
    // The first line can come before the node's status write with the start time has landed.
    const running = await waitForPod(core, namespace, "lowered", "to report its start time", (p) =>
      Boolean(p.status?.startTime),
    );
    const elapsed = Math.ceil((Date.now() - new Date(running.status?.startTime ?? 0).getTime()) / 1000);
    // The client's default patch type is a JSON patch.
    await core.patchNamespacedPod({
      namespace,
      name: "lowered",
      body: [{ op: "replace", path: "/spec/activeDeadlineSeconds", value: Math.max(1, elapsed) }],
    });

    const pod = await waitForPod(core, namespace, "lowered", "to stop", (p) => terminated(p) !== undefined);
    expect(pod.status).toMatchObject({ phase: "Failed", reason: "DeadlineExceeded" });
    expect(terminated(pod)).toMatchObject({ exitCode: 0 });
    expect(pod.metadata?.deletionTimestamp).toBeUndefined();
    expect(await core.readNamespacedPodLog({ namespace, name: "lowered" })).toBe(
      "started\nstopping on TERM\n",
    );
  });

  it("on deletion sends SIGTERM, waits the grace period, then SIGKILLs and completes the deletion", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "process-node-test-"));
    const signals = path.join(dir, "signals");
    const tag = marker();
    const script = `trap 'echo TERM >> ${signals}' TERM; sh -c 'sleep 300' ${tag} & while true; do sleep 0.1; done`;
    await core.createNamespacedPod({
      namespace,
      body: shellPod("ignores-term", script, { terminationGracePeriodSeconds: 3 }),
    });
    await waitForPod(
      core,
      namespace,
      "ignores-term",
      "to run",
      (p) => p.status?.containerStatuses?.[0]?.state?.running !== undefined,
    );
    await waitFor(
      "the pod's processes",
      async () => (processesWithMarker(tag).length > 0 ? true : undefined),
      {
        timeoutMs: 10_000,
      },
    );

    const deletedAt = Date.now();
    await core.deleteNamespacedPod({ namespace, name: "ignores-term" });
    await waitFor(
      "SIGTERM to reach the pod",
      async () => ((await readFile(signals, "utf8").catch(() => "")) ? true : undefined),
      {
        timeoutMs: 5_000,
      },
    );
    expect(processesWithMarker(tag).length).toBeGreaterThan(0);
    await waitForPodGone(core, namespace, "ignores-term", 30_000);
    const elapsed = Date.now() - deletedAt;

    expect(await readFile(signals, "utf8")).toBe("TERM\n");
    expect(elapsed).toBeGreaterThanOrEqual(3_000);
    expect(elapsed).toBeLessThan(10_000);
    expect(processesWithMarker(tag)).toEqual([]);
  });

  it("kills what the main process left running when it exits", async () => {
    const tag = marker();
    await core.createNamespacedPod({
      namespace,
      body: shellPod("leaves-a-child", `sh -c 'sleep 300' ${tag} & sleep 0.5; exit 0`),
    });
    const pod = await waitForPod(core, namespace, "leaves-a-child", "to finish", finished);
    expect(pod.status?.phase).toBe("Succeeded");
    await waitFor(
      "the orphan to be killed",
      async () => (processesWithMarker(tag).length === 0 ? true : undefined),
      {
        timeoutMs: 5_000,
      },
    );
  });

  it("reports Error, exit code 137 when the container's main process is SIGKILLed from outside, as the OOM killer does", async () => {
    const tag = marker();
    await core.createNamespacedPod({ namespace, body: shellPod("killed-outside", `sleep 300; : ${tag}`) });
    await waitForPod(core, namespace, "killed-outside", "to run", (p) => p.status?.phase === "Running");
    // The node's wrappers carry the script in their argv too: the main process is the innermost.
    const parentOf = (pid: number) =>
      Number(/^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]);
    const main = await waitFor(
      "the container's main process",
      async () => {
        const found = processesWithMarker(tag);
        return found.find((pid) => !found.some((other) => parentOf(other) === pid));
      },
      { timeoutMs: 10_000 },
    );
    process.kill(main, "SIGKILL");
    const pod = await waitForPod(core, namespace, "killed-outside", "to finish", finished);
    expect(pod.status?.phase).toBe("Failed");
    expect(terminated(pod)).toMatchObject({ reason: "Error", exitCode: 137 });
    expect(await core.readNamespacedPodLog({ namespace, name: "killed-outside" })).toBe("");
  });

  it("can lose a pod as a node failure would: processes gone, pod failed and removed", async () => {
    const tag = marker();
    await core.createNamespacedPod({
      namespace,
      body: shellPod("lost", `sh -c 'sleep 300' ${tag}; sleep 300`),
    });
    await waitForPod(core, namespace, "lost", "to run", (p) => p.status?.phase === "Running");
    await waitFor(
      "the pod's processes",
      async () => (processesWithMarker(tag).length > 0 ? true : undefined),
      {
        timeoutMs: 10_000,
      },
    );

    const seen: { type: string; pod: V1Pod }[] = [];
    const watch = await new Watch(kubeConfig).watch(
      `/api/v1/namespaces/${namespace}/pods`,
      { fieldSelector: "metadata.name=lost" },
      (type, pod: V1Pod) => seen.push({ type, pod }),
      () => {},
    );
    try {
      await losePod(namespace, "lost");
      await waitForPodGone(core, namespace, "lost", 10_000);
      await waitFor(
        "the DELETED event",
        async () => (seen.some((e) => e.type === "DELETED") ? true : undefined),
        {
          timeoutMs: 5_000,
        },
      );
    } finally {
      watch.abort();
    }

    // What a controller sees: Failed with PodGC's DisruptionTarget condition, and no container
    // termination reported, because the node never said another word about the pod.
    const last = seen.filter((e) => e.type === "DELETED").at(-1)?.pod;
    expect(last?.status?.phase).toBe("Failed");
    expect(last?.status?.conditions?.find((c) => c.type === "DisruptionTarget")).toMatchObject({
      status: "True",
      reason: "DeletionByPodGC",
      message: "PodGC: node no longer exists",
    });
    expect(last?.status?.containerStatuses?.[0]?.state?.running).toBeDefined();
    expect(processesWithMarker(tag)).toEqual([]);
  });

  it("runs the runner image's `playbook` command as this checkout's build and reports its report", async () => {
    if (!existsSync(path.join(repoRoot(), "dist", "src", "cli", "main.js"))) {
      throw new Error("dist/src/cli/main.js is missing: run `npm run build` (npm test does it in pretest)");
    }
    const plan = {
      name: "nightly",
      namespace,
      runStartTime: new Date().toISOString(),
      defaults: { ceilingMs: 3_600_000, maxCeilingMs: 86_400_000, stallMs: 600_000, killGraceMs: 10_000 },
      spec: { tasks: [{ name: "greet", run: "echo hello" }] },
    };
    await core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: "runner" },
        spec: {
          restartPolicy: "Never",
          containers: [
            {
              name: "runner",
              image: "ghcr.io/playbook-controller/playbook-controller:dev",
              command: ["playbook", "pod-runner"],
              env: [{ name: "PLAYBOOK_PLAN", value: JSON.stringify(plan) }],
            },
          ],
        },
      },
    });
    const pod = await waitForPod(core, namespace, "runner", "to finish", finished);
    expect(pod.status?.phase).toBe("Succeeded");
    const report = decodeReport(terminated(pod)?.message ?? "", 1);
    expect(report).toMatchObject({ phase: "Succeeded", reason: "Succeeded" });
  });

  it("restarts an OnFailure container after a back-off and keeps its last termination", async () => {
    const script = 'if [ -f "$HOME/ran" ]; then exit 0; fi; touch "$HOME/ran"; exit 1';
    await core.createNamespacedPod({
      namespace,
      body: shellPod("retries", script, { restartPolicy: "OnFailure" }),
    });
    const pod = await waitForPod(core, namespace, "retries", "to succeed", finished, 60_000);
    expect(pod.status?.phase).toBe("Succeeded");
    const status = pod.status?.containerStatuses?.[0];
    expect(status?.restartCount).toBe(1);
    expect(status?.lastState?.terminated).toMatchObject({ exitCode: 1, reason: "Error" });
    expect(status?.state?.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
  });

  it("serves the container's output to `kubectl logs` through the apiserver", async () => {
    await core.createNamespacedPod({
      namespace,
      body: shellPod("talks", 'for i in 1 2 3; do echo "line $i"; done; echo "to stderr" >&2'),
    });
    await waitForPod(core, namespace, "talks", "to finish", finished);
    expect(await core.readNamespacedPodLog({ namespace, name: "talks" })).toBe(
      "line 1\nline 2\nline 3\nto stderr\n",
    );
    expect(await core.readNamespacedPodLog({ namespace, name: "talks", tailLines: 2 })).toBe(
      "line 3\nto stderr\n",
    );
  });

  it("reports StartError when the command does not exist", async () => {
    const body = shellPod("no-such-command", "");
    const container = body.spec?.containers[0];
    if (container) container.command = ["definitely-not-a-command"];
    await core.createNamespacedPod({ namespace, body });
    const pod = await waitForPod(core, namespace, "no-such-command", "to finish", finished);
    expect(pod.status?.phase).toBe("Failed");
    expect(terminated(pod)).toMatchObject({ exitCode: 128, reason: "StartError" });
    expect(terminated(pod)?.message).toContain('"definitely-not-a-command": executable file not found');
  });
});

/** The process node's folder for a pod: `<work dir>/<namespace>_<name>_<uid>` under .cluster/test-<pid>/. */
function podFolder(pod: V1Pod): string {
  const parent = path.join(repoRoot(), ".cluster");
  const name = `${pod.metadata?.namespace}_${pod.metadata?.name}_${pod.metadata?.uid}`;
  for (const entry of readdirSync(parent)) {
    const candidate = path.join(parent, entry, "process-node", name);
    if (existsSync(candidate)) return candidate;
  }
  throw new Error(`no process-node folder for pod ${name}`);
}

const hostMountsUnder = (dir: string): string[] =>
  readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .filter((line) => line.includes(dir));

describe("the process node's in-cluster API access and volumes", () => {
  const server = new URL(kubeConfig.getCurrentCluster()?.server ?? "");

  it("gives a pod its service account's bound token: kubectl and client-node in it act as that account, under RBAC", async () => {
    const rbac = kubeConfig.makeApiClient(RbacAuthorizationV1Api);
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: "reader" } } });
    await rbac.createNamespacedRole({
      namespace,
      body: {
        metadata: { name: "pod-reader" },
        rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["get", "list"] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: "reader" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "pod-reader" },
        subjects: [{ kind: "ServiceAccount", name: "reader", namespace }],
      },
    });
    const kubectl = path.join(inject("binDir"), "kubectl");
    const clientNode = pathToFileURL(
      path.join(repoRoot(), "node_modules", "@kubernetes", "client-node", "dist", "index.js"),
    ).href;
    // What the controller does in its pod: KubeConfig.loadFromDefault(), which falls back to in-cluster.
    const program = `
      const k8s = await import(process.argv[1]);
      const kc = new k8s.KubeConfig();
      kc.loadFromDefault();
      const api = kc.makeApiClient(k8s.CoreV1Api);
      const pods = await api.listNamespacedPod({ namespace: process.env.NS, fieldSelector: "metadata.name=" + process.env.HOSTNAME });
      console.log("client-node", kc.getCurrentCluster().server, pods.items.map((p) => p.metadata.name).join(","));
      await api.listNamespacedSecret({ namespace: process.env.NS }).catch((e) => console.log("client-node secrets", e.code));`;
    const script = [
      `${kubectl} auth whoami -o jsonpath='{.status.userInfo.username} {.status.userInfo.extra.authentication\\.kubernetes\\.io/pod-name[0]}'; echo`,
      `${kubectl} get pods --field-selector metadata.name=$HOSTNAME -o name`,
      `${kubectl} get secrets 2>&1; echo "secrets exit $?"`,
      `${process.execPath} --input-type=module -e '${program}' ${clientNode}`,
    ].join("\n");
    const body = shellPod("in-cluster", script, { serviceAccountName: "reader" });
    body.spec?.containers[0]?.env?.push({
      name: "NS",
      valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } },
    });
    await core.createNamespacedPod({ namespace, body });
    const pod = await waitForPod(core, namespace, "in-cluster", "to finish", finished);

    // The ServiceAccount admission added the projected volume the token came from.
    expect(pod.spec?.volumes?.some((v) => v.name.startsWith("kube-api-access-"))).toBe(true);
    const log = await core.readNamespacedPodLog({ namespace, name: "in-cluster" });
    const account = `system:serviceaccount:${namespace}:reader`;
    expect(log.split("\n")).toEqual([
      `${account} in-cluster`,
      "pod/in-cluster",
      `Error from server (Forbidden): secrets is forbidden: User "${account}" cannot list resource "secrets" in API group "" in the namespace "${namespace}"`,
      "secrets exit 1",
      `client-node https://${server.host} in-cluster`,
      "client-node secrets 403",
      "",
    ]);
    expect(pod.status?.phase).toBe("Succeeded");
  });

  it("mounts no token when automountServiceAccountToken is false, and still sets the kubernetes Service's environment", async () => {
    const script =
      'test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo no token; echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT $KUBERNETES_PORT"';
    await core.createNamespacedPod({
      namespace,
      body: shellPod("no-token", script, { automountServiceAccountToken: false }),
    });
    const pod = await waitForPod(core, namespace, "no-token", "to finish", finished);
    expect(pod.spec?.volumes ?? []).toEqual([]);
    expect(await core.readNamespacedPodLog({ namespace, name: "no-token" })).toBe(
      `no token\n${server.hostname}:${server.port} tcp://${server.host}\n`,
    );
  });

  it("gives a pod a private emptyDir at /tmp that goes with the pod, leaving nothing mounted or running", async () => {
    const tag = marker();
    const script = `echo private > /tmp/${tag}; ls -A /tmp; sh -c 'sleep 300' ${tag}`;
    const body = shellPod("scratch", script, { volumes: [{ name: "scratch", emptyDir: {} }] });
    const container = body.spec?.containers[0];
    if (container) container.volumeMounts = [{ name: "scratch", mountPath: "/tmp" }];
    await core.createNamespacedPod({ namespace, body });
    const pod = await waitForPod(core, namespace, "scratch", "to run", (p) => p.status?.phase === "Running");
    await waitFor(
      "the pod's processes",
      async () => (processesWithMarker(tag).length > 0 ? true : undefined),
      {
        timeoutMs: 10_000,
      },
    );
    const folder = podFolder(pod);
    const written = path.join(folder, "volumes", "scratch", tag);

    // Only what the pod wrote is in its /tmp (and, where this checkout lives under /tmp, the way to
    // it, shown again so the node can run its commands); the machine's /tmp never sees the file.
    const checkoutUnderTmp = path.relative(realpathSync("/tmp"), repoRoot()).split(path.sep)[0];
    const expected = [
      tag,
      ...(checkoutUnderTmp && !checkoutUnderTmp.startsWith("..") ? [checkoutUnderTmp] : []),
    ];
    expect(await core.readNamespacedPodLog({ namespace, name: "scratch" })).toBe(
      `${expected.sort().join("\n")}\n`,
    );
    expect(readFileSync(written, "utf8")).toBe("private\n");
    expect(existsSync(path.join("/tmp", tag))).toBe(false);
    expect(hostMountsUnder(folder)).toEqual([]);

    await core.deleteNamespacedPod({ namespace, name: "scratch", gracePeriodSeconds: 1 });
    await waitForPodGone(core, namespace, "scratch", 30_000);
    await waitFor("the emptyDir to be removed", async () => (existsSync(written) ? undefined : true), {
      timeoutMs: 5_000,
    });
    expect(processesWithMarker(tag)).toEqual([]);
    expect(hostMountsUnder(path.dirname(folder))).toEqual([]);
  });

  it("mounts configMap and secret volumes read-only and refuses a mount point it would have to create under /etc", async () => {
    await core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: "settings" }, data: { greeting: "hello from a config map" } },
    });
    await core.createNamespacedSecret({
      namespace,
      body: { metadata: { name: "credentials" }, stringData: { password: "s3cret" } },
    });
    const script =
      "cat /mnt/settings/greeting; echo; cat /mnt/credentials/password; echo; touch /mnt/settings/x || true";
    const body = shellPod("configured", script, {
      volumes: [
        { name: "settings", configMap: { name: "settings" } },
        { name: "credentials", secret: { secretName: "credentials" } },
      ],
    });
    const container = body.spec?.containers[0];
    if (container) {
      container.volumeMounts = [
        { name: "settings", mountPath: "/mnt/settings" },
        { name: "credentials", mountPath: "/mnt/credentials" },
      ];
    }
    await core.createNamespacedPod({ namespace, body });
    await waitForPod(core, namespace, "configured", "to finish", finished);
    expect(await core.readNamespacedPodLog({ namespace, name: "configured" })).toBe(
      "hello from a config map\ns3cret\ntouch: cannot touch '/mnt/settings/x': Read-only file system\n",
    );

    const refused = shellPod("under-etc", "echo ran", {
      volumes: [{ name: "settings", configMap: { name: "settings" } }],
    });
    const refusedContainer = refused.spec?.containers[0];
    if (refusedContainer)
      refusedContainer.volumeMounts = [{ name: "settings", mountPath: "/etc/playbook-settings" }];
    await core.createNamespacedPod({ namespace, body: refused });
    const pod = await waitForPod(core, namespace, "under-etc", "to finish", finished);
    expect(pod.status?.phase).toBe("Failed");
    expect(terminated(pod)).toMatchObject({ exitCode: 128, reason: "StartError" });
    expect(terminated(pod)?.message).toContain("/etc/playbook-settings does not exist");
  });
});

describe.runIf(detectNetworkNamespaces() !== undefined)("the process node's pod networks", () => {
  it("gives each pod its own loopback: two pods listen on the same port, which stays free on the machine", async () => {
    const port = 18_000 + Math.floor(Math.random() * 2_000);
    // Each pod serves its name, asks itself, and keeps the port a few seconds so the pods overlap.
    const program = `
      const server = require("node:http").createServer((_, res) => res.end(process.env.HOSTNAME));
      server.listen(${port}, "127.0.0.1", async () => {
        console.log("answered by", await (await fetch("http://127.0.0.1:${port}")).text());
        console.log(require("node:fs").readlinkSync("/proc/self/ns/net"));
        setTimeout(() => server.close(), 3000);
      });`;
    for (const name of ["listener-a", "listener-b"]) {
      await core.createNamespacedPod({
        namespace,
        body: shellPod(name, `${process.execPath} -e '${program}'`),
      });
    }
    await waitForPod(core, namespace, "listener-a", "to run", (p) => p.status?.phase === "Running");
    const onMachine = await new Promise<string>((resolve) => {
      const socket = connect(port, "127.0.0.1", () => {
        socket.destroy();
        resolve("connected");
      });
      socket.on("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? "error"));
    });
    expect(onMachine).toBe("ECONNREFUSED");
    const namespaces = new Set<string>();
    for (const name of ["listener-a", "listener-b"]) {
      const pod = await waitForPod(core, namespace, name, "to finish", finished);
      const [answer, network] = (await core.readNamespacedPodLog({ namespace, name })).split("\n");
      expect(answer).toBe(`answered by ${name}`);
      namespaces.add(network ?? "");
      expect(pod.status?.phase).toBe("Succeeded");
      // The sandbox holding the namespace goes with the pod's end.
      await waitFor(
        `${name}'s sandbox to stop`,
        async () => (processesWorkingUnder(podFolder(pod)).length === 0 ? true : undefined),
        { timeoutMs: 5_000 },
      );
    }
    expect(namespaces.size).toBe(2);
    expect(namespaces.has(readlinkSync("/proc/self/ns/net"))).toBe(false);
  });
});
