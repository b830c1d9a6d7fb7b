// The log archive on a real kubelet (issue 58): the controller follows the runner's log through
// the API server (pods/log, follow=true) while the kubelet rotates it (4Mi x 2 on this node), and
// the object holds every byte the runner printed, with status.log's sha256; a store that stops
// mid-run never changes the run's outcome (LogArchived False StoreUnreachable); past the policy's
// maximums.archivedLogBytes the head, one left-out line and the tail are kept; and no pod holds
// the store's credentials, whose bucket refuses a PUT that is not signed with them. Once a run's
// pod is deleted, `playbook logs` reads its archived log back through the aggregated API the
// controller serves (test/harness/log-api.ts) and prints the same bytes as from the pod.
import { spawn } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { isProgressRecord } from "../../src/cli/cluster/run-logs.js";
import { attemptLogKey, attemptReportKey } from "../../src/controller/log-archive/archive-keys.js";
import { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  getPlaybook,
  kubectl,
  type RunningController,
  runnerLogs,
  startController,
  taskLines,
  waitForFinished,
} from "../controller/support.js";
import { type ArchiveOnStore, startArchiveOnStore } from "../harness/archive-on-store.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { logApiEndpoint, logApiServingCertificate, registerLogApi } from "../harness/log-api.js";
import type { ObjectStore } from "../harness/object-store.js";
import { freePort } from "../harness/processes.js";
import { realNodePodLogsDir } from "../harness/real-node/real-node.js";
import {
  archived,
  expectHeadAndTail,
  generated,
  generator,
  logOf,
  type StatusLog,
  sha256,
} from "../support/archived-lines.js";
import { CLI } from "../support/cli.js";

const MiB = 1024 * 1024;
const { core } = clients();
let namespace = "";
let stateDir = "";
let archive: ArchiveOnStore;
let store: ObjectStore;
let controller: RunningController | undefined;
/** The controller's settings: the archive in SeaweedFS, and the log API the APIService names. */
let controllerOptions: Record<string, string | boolean> = {};
let unregisterLogApi: (() => Promise<void>) | undefined;
let stopRelays: (() => Promise<void>) | undefined;

const readObject = (key: string) => archive.readObject(key);

/** `playbook logs NAME -n NAMESPACE` as the cluster's admin: its exit code, stdout as bytes, stderr. */
function playbookLogs(name: string): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  const child = spawn(process.execPath, [CLI, "logs", name, "-n", namespace], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, KUBECONFIG: inject("kubeconfig") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on("data", (chunk: Buffer) => out.push(chunk));
  child.stderr.on("data", (chunk: Buffer) => err.push(chunk));
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) =>
      resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString() }),
    );
  });
}

/** Waits until the run's LogArchived says Archiving. */
async function archivingOf(name: string): Promise<void> {
  const deadline = Date.now() + realNode.taskStartMs + 60_000;
  for (;;) {
    const playbook = await getPlaybook(namespace, name);
    if (condition(playbook, "LogArchived")?.reason === "Archiving") return;
    if (Date.now() > deadline)
      throw new Error(`${name} never began archiving: ${JSON.stringify(playbook.status)}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

beforeAll(async () => {
  // The controller's credentials, as the chart gives them: the SDK's env, in the controller only.
  archive = await startArchiveOnStore(inject("binDir"), "rn-log-archive");
  ({ store, stateDir } = archive);
  namespace = await createTestNamespace(core, "rn-log-archive", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
  // The log API the archive is read back through, behind the APIService as the chart registers it.
  const serving = await logApiServingCertificate(stateDir, namespace);
  const port = await freePort();
  const endpoint = await logApiEndpoint(path.dirname(inject("kubeconfig")), port);
  stopRelays = endpoint.stop;
  controllerOptions = {
    ...realNode.controller,
    ...archive.controllerOptions,
    logApiAddress: `${endpoint.listen}:${port}`,
    logApiCertFile: serving.certFile,
    logApiKeyFile: serving.keyFile,
  };
  controller = startController([namespace], controllerOptions);
  unregisterLogApi = await registerLogApi(makeClients(clients().kubeConfig).api, {
    namespace,
    address: endpoint.endpoint,
    port,
    caBundle: readFileSync(serving.caFile),
  });
}, 180_000);
afterAll(async () => {
  await unregisterLogApi?.();
  await controller?.stop();
  await stopRelays?.();
  if (namespace) await deleteTestNamespace(core, namespace);
  await archive?.stop();
});

describe("the log archive on a real node", () => {
  it("archives 40 MiB the kubelet rotated under it, every byte, with status.log's sha256", async () => {
    const name = "forty";
    await createPlaybook(namespace, name, {
      ceiling: "5m",
      tasks: [{ name: "gen", run: generator(40, 300) }],
    });
    const ended = await waitForFinished(namespace, name, realNode.taskStartMs + 240_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const done = await archived(namespace, name);
    expect(condition(done, "LogArchived")).toMatchObject({ status: "True", reason: "Archived" });
    const log = logOf(done) as StatusLog;
    expect(log.key).toBe(attemptLogKey("", { namespace, name, uid: done.metadata.uid as string }, 1));
    const object = await readObject(log.key);
    expect(object.length).toBe(log.bytes);
    expect(sha256(object)).toBe(log.sha256);
    // Every line the task printed, in order, behind the runner's prefix: nothing lost to rotation.
    const text = object.toString("utf8");
    expect(taskLines(text, "gen")).toEqual(generated(40));
    // The report that decided the run, beside the log.
    const reportKey = attemptReportKey("", { namespace, name, uid: done.metadata.uid as string }, 1);
    expect(JSON.parse((await readObject(reportKey)).toString("utf8"))).toMatchObject({ phase: "Succeeded" });
    // The node no longer holds all of it: its rotation dropped files the archive has the bytes of.
    const pod = JSON.parse(
      (await kubectl(["-n", namespace, "get", "pod", `${name}-1`, "-o", "json"])).stdout,
    );
    const dir = path.join(
      realNodePodLogsDir(path.dirname(inject("kubeconfig"))),
      `${namespace}_${name}-1_${pod.metadata.uid}`,
      "runner",
    );
    const held = readdirSync(dir).reduce((sum, file) => sum + statSync(path.join(dir, file)).size, 0);
    expect(held).toBeLessThan(object.length / 2);
    // What `kubectl logs` still shows (the newest file only, after rotation; it may be empty right
    // after one) is the archive's end.
    const shown = (await kubectl(["-n", namespace, "logs", `${name}-1`, "-c", "runner", "--tail=2000"]))
      .stdout;
    expect(text.endsWith(shown)).toBe(true);
  }, 420_000);

  it("prints the same bytes with playbook logs once the pod is deleted, from the archive", async () => {
    const name = "read-back";
    await createPlaybook(namespace, name, {
      ceiling: "3m",
      tasks: [
        { name: "gen", run: generator(2, 100) },
        { name: "utf8", run: "printf 'caf\\303\\251 \\342\\234\\223 tab\\there\\n'" },
      ],
    });
    const ended = await waitForFinished(namespace, name, realNode.taskStartMs + realNode.finishMs + 60_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const done = await archived(namespace, name);
    expect(condition(done, "LogArchived")).toMatchObject({ status: "True", reason: "Archived" });
    const log = logOf(done) as StatusLog;
    const object = await readObject(log.key);
    expect(object.length).toBe(log.bytes);
    expect(sha256(object)).toBe(log.sha256);

    // While the pod is there: its log, not the archive's.
    const fromPod = await playbookLogs(name);
    expect(fromPod.code, fromPod.stderr).toBe(0);
    expect(fromPod.stderr).not.toContain("from the log archive");
    expect(taskLines(fromPod.stdout.toString("utf8"), "gen")).toEqual(generated(2));
    expect(fromPod.stdout.toString("utf8")).toContain("[utf8] café ✓ tab\there\n");

    const deleted = await kubectl(["-n", namespace, "delete", "pod", `${name}-1`, "--wait=true"]);
    expect(deleted.stderr).toBe("");
    const gone = await kubectl([
      "-n",
      namespace,
      "get",
      "pod",
      `${name}-1`,
      "--ignore-not-found",
      "-o",
      "name",
    ]);
    expect(gone.stdout).toBe("");

    // The pod gone: the archive's, byte for byte what the pod's log printed.
    const fromArchive = await playbookLogs(name);
    expect(fromArchive.code, fromArchive.stderr).toBe(0);
    expect(fromArchive.stderr).toContain(`playbook: from the log archive: attempt 1, ${log.bytes} bytes`);
    expect(fromArchive.stdout.length).toBe(fromPod.stdout.length);
    expect(sha256(fromArchive.stdout)).toBe(sha256(fromPod.stdout));
    // The object is what the runner container printed, status.log's sha256, and holds the
    // runner's progress records (at each task's start and end), which `playbook logs` leaves out
    // from a pod as from the archive: what a user sees is the object's other lines, every byte.
    const lines = object.toString("utf8").split("\n");
    expect(lines.pop()).toBe("");
    expect(lines.filter(isProgressRecord).length).toBeGreaterThanOrEqual(4);
    const shown = Buffer.from(
      lines
        .filter((line) => !isProgressRecord(line))
        .map((line) => `${line}\n`)
        .join(""),
    );
    expect(fromArchive.stdout.length).toBe(shown.length);
    expect(sha256(fromArchive.stdout)).toBe(sha256(shown));
  }, 420_000);

  it("follows a run with -f printing a gone attempt from the archive before the live one, in attempt order", async () => {
    const name = "retried";
    const playbook = await createPlaybook(namespace, name, {
      ceiling: "5m",
      backoffLimit: 1,
      tasks: [
        {
          name: "hold",
          // The first attempt waits for its pod to be deleted; the second until the run is cancelled.
          run: `case "$(cat /etc/hostname)" in *-1) echo first-attempt; sleep 300;; *) echo second-attempt; sleep 300;; esac`,
        },
      ],
    });
    const run = { namespace, name, uid: playbook.metadata.uid as string };
    const deadline = realNode.taskStartMs + 60_000;
    const started = Date.now();
    while (!(await runnerLogs(namespace, name).catch(() => "")).includes("[hold] first-attempt")) {
      if (Date.now() - started > deadline) throw new Error(`${name}-1 never printed its line`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    await kubectl(["-n", namespace, "delete", "pod", `${name}-1`, "--wait=true"]);
    // The first attempt's object complete (its record beside it) before the log is followed.
    const record = `${attemptLogKey("", run, 1)}.json`;
    while ((await readObject(record)).length === 0) {
      if (Date.now() - started > deadline + 60_000) throw new Error(`${record} was never written`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const child = spawn(process.execPath, [CLI, "logs", "-f", name, "-n", namespace], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, KUBECONFIG: inject("kubeconfig") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const closed = new Promise<number | null>((resolve) => child.on("close", resolve));
    while (!stdout.includes("[hold] second-attempt")) {
      if (Date.now() - started > deadline + 180_000) throw new Error(`no second attempt followed: ${stderr}`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    await kubectl([
      "-n",
      namespace,
      "patch",
      "playbook",
      name,
      "--type=merge",
      "-p",
      '{"spec":{"cancel":true}}',
    ]);
    const code = await closed;
    expect(code, stderr).toBe(0);
    expect(stderr).toContain("playbook: from the log archive: attempt 1,");
    expect(stdout).toMatch(
      new RegExp(
        `^--- pod ${name}-1 \\(attempt 1\\) ---\\n(.*\\n)*\\[hold\\] first-attempt\\n(.*\\n)*--- pod ${name}-2 \\(attempt 2\\) ---\\n(.*\\n)*\\[hold\\] second-attempt\\n`,
      ),
    );
    expect(stdout.match(/^--- pod /gm)).toHaveLength(2);
  }, 420_000);

  it("holds no credential of the store in the pod, and the bucket refuses a PUT not signed with the controller's keys", async () => {
    const name = "no-keys";
    await createPlaybook(namespace, name, { ceiling: "2m", tasks: [{ name: "env", run: "env | sort" }] });
    const ended = await waitForFinished(namespace, name, realNode.taskStartMs + realNode.finishMs);
    const pod = JSON.parse(
      (await kubectl(["-n", namespace, "get", "pod", `${name}-1`, "-o", "json"])).stdout,
    );
    const text = JSON.stringify(pod);
    expect(text).not.toContain(store.secretAccessKey);
    expect(text).not.toContain(store.accessKeyId);
    expect(text).not.toMatch(/AWS_/);
    const printed = taskLines(await runnerLogs(namespace, name), "env");
    expect(printed.some((line) => line.startsWith("AWS_"))).toBe(false);
    // Another run's object: an unsigned PUT and one signed with keys not the controller's are refused.
    const done = await archived(namespace, name);
    const target = logOf(done)?.key as string;
    expect(target).toBeDefined();
    const unsigned = await fetch(`${store.endpoint}/${store.bucket}/${target}`, {
      method: "PUT",
      body: "forged",
    });
    expect(unsigned.status).toBe(403);
    const stranger = new ArchiveStore({
      endpoint: store.endpoint,
      bucket: store.bucket,
      region: store.region,
      prefix: "",
      forcePathStyle: true,
      credentials: { accessKeyId: "AKFOREIGN", secretAccessKey: "not-the-controllers" },
    });
    await expect(stranger.putObject(target, "forged", "text/plain")).rejects.toMatchObject({
      $metadata: { httpStatusCode: 403 },
    });
    stranger.destroy();
    expect(sha256(await readObject(target))).toBe(logOf(done)?.sha256);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True" });
  }, 300_000);

  it("keeps the head, one left-out line and the tail past the policy's archivedLogBytes", async () => {
    const policy = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "PlaybookPolicy",
      metadata: { name: "default", namespace },
      spec: { maximums: { archivedLogBytes: "16Mi" } },
    };
    const applied = await kubectl(["apply", "--server-side", "-f", "-"], { input: JSON.stringify(policy) });
    expect(applied.stderr).toBe("");
    try {
      const name = "capped";
      await createPlaybook(namespace, name, {
        ceiling: "5m",
        tasks: [{ name: "gen", run: generator(40, 100) }],
      });
      const ended = await waitForFinished(namespace, name, realNode.taskStartMs + 240_000);
      expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      const done = await archived(namespace, name);
      const said = condition(done, "LogArchived");
      expect(said).toMatchObject({ status: "False", reason: "CapReached" });
      expect(said?.message).toMatch(/bytes past maximums\.archivedLogBytes \(16777216\) were left out/);
      const log = logOf(done) as StatusLog;
      const object = await readObject(log.key);
      expect(object.length).toBe(log.bytes);
      expect(object.length).toBeLessThanOrEqual(16 * MiB);
      expect(sha256(object)).toBe(log.sha256);
      const text = object.toString("utf8");
      expectHeadAndTail(text, 40);
    } finally {
      await kubectl(["-n", namespace, "delete", "playbookpolicy", "default"]);
    }
  }, 420_000);

  it("begins again from what the kubelet still holds after a controller restart, and says Incomplete", async () => {
    const name = "restarted";
    await createPlaybook(namespace, name, {
      ceiling: "5m",
      tasks: [{ name: "gen", run: generator(12, 1500) }],
    });
    await archivingOf(name);
    await controller?.stop();
    // The next controller finds the attempt's upload left behind and the status saying Archiving.
    controller = startController([namespace], controllerOptions);
    const ended = await waitForFinished(namespace, name, 240_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const done = await archived(namespace, name);
    const said = condition(done, "LogArchived");
    expect(said).toMatchObject({ status: "False", reason: "Incomplete" });
    expect(said?.message).toMatch(/the controller restarted while the attempt ran/);
    const log = logOf(done) as StatusLog;
    const object = await readObject(log.key);
    expect(sha256(object)).toBe(log.sha256);
    // The end of the output is there, in order.
    const lines = taskLines(object.toString("utf8"), "gen");
    const all = generated(12);
    expect(lines.slice(1)).toEqual(all.slice(all.length - lines.length + 1));
    const client = store.client();
    expect(await client.listUploads(log.key)).toEqual([]);
    client.destroy();
  }, 420_000);

  it("says Incomplete, never Archived, when the kubelet's reader fell behind its rotation and skipped part of the log", async () => {
    const name = "skipped";
    // 120 MiB at up to some 20 MiB/s: while the store stands still the follow stops reading once
    // its parts (8 MiB each) and the connections' buffers are full, and the kubelet rotates the
    // log (4Mi x 2, checked every 3 s) past its reader more than once. A slower task (60 MiB at
    // 6 MiB/s) printed too little past those buffers on a loaded machine: nothing was skipped.
    const blocks = 120;
    await createPlaybook(namespace, name, {
      ceiling: "5m",
      tasks: [{ name: "gen", run: generator(blocks, 40) }],
    });
    await archivingOf(name);
    const weed = store.process()?.pid;
    if (weed === undefined) throw new Error("the store runs no process");
    process.kill(weed, "SIGSTOP");
    try {
      // Shorter than a store call's deadline (15 s): the part in flight goes on, no retry fails.
      await new Promise((resolve) => setTimeout(resolve, 12_000));
    } finally {
      process.kill(weed, "SIGCONT");
    }
    const ended = await waitForFinished(namespace, name, 240_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const done = await archived(namespace, name);
    const log = logOf(done);
    if (!log) throw new Error(`no status.log: ${JSON.stringify(done.status)}`);
    // What the object holds of the task's numbered lines: the set-up must have made the reader skip.
    const numbers = (await archive.readObject(log.key))
      .toString("utf8")
      .split("\n")
      .filter((line) => line.startsWith("[gen] "))
      .map((line) => Number(line.slice(6, 14)));
    const printed = blocks * 1024;
    const skipped = numbers.length < printed || numbers.some((n, i) => n !== i);
    expect(skipped, `the object holds ${numbers.length} of ${printed} lines in order`).toBe(true);
    const said = condition(done, "LogArchived");
    expect(said).toMatchObject({ status: "False", reason: "Incomplete" });
    expect(said?.message).toMatch(
      /bytes archived; (the kubelet's log reader skipped part of the log \(it fell behind the log's rotation\): \d+ of the runner's progress records are missing|the log ends while the plan's task 1 runs although the runner ended with its report)/,
    );
  }, 420_000);

  it("ends a run with its true outcome when the store stops mid-run: LogArchived False StoreUnreachable", async () => {
    const name = "store-down";
    await createPlaybook(namespace, name, {
      ceiling: "5m",
      tasks: [{ name: "gen", run: generator(30, 1000) }],
    });
    // Once the first part is in flight the store goes away for longer than the retries' bound.
    await archivingOf(name);
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    await store.stop();
    try {
      const ended = await waitForFinished(namespace, name, 240_000);
      expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      const done = await archived(namespace, name);
      const said = condition(done, "LogArchived");
      expect(said).toMatchObject({ status: "False", reason: "StoreUnreachable" });
      expect(said?.message).toMatch(/the store did not answer: .+ failed 3 times/);
      expect(logOf(done)).toBeUndefined();
      const pod = JSON.parse(
        (await kubectl(["-n", namespace, "get", "pod", `${name}-1`, "-o", "json"])).stdout,
      );
      const runner = pod.status.containerStatuses.find((c: { name: string }) => c.name === "runner");
      expect(runner.state.terminated.reason).not.toBe("OOMKilled");
      expect(runner.state.terminated.exitCode).toBe(0);
      expect(await controller?.controller.metrics.registry.metrics()).toMatch(
        /playbook_log_archive_failures_total\{reason="store_unreachable"\} [1-9]/,
      );
    } finally {
      await store.start();
    }
  }, 420_000);
});
