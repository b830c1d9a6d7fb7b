// The log archive on a real kubelet with the runner uploading its own log (issue 58,
// --log-archive-upload=runner): the runner in the run's pod PUTs its log in segments through URLs
// the controller presigned for that attempt's keys alone, handed over in a Secret only the
// runner's container mounts; the controller composes the object once the attempt ended. Output
// as fast as the task can print it, rotated by the kubelet (4Mi x 2 on this node) many times over,
// is kept whole; a store that stops mid-run never changes the run's outcome and never holds the
// runner's memory; past the policy's maximums.archivedLogBytes the head, one left-out line and
// the tail are kept.
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { attemptLogKey } from "../../src/controller/log-archive/archive-keys.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  kubectl,
  type RunningController,
  startController,
  taskLines,
  waitForFinished,
} from "../controller/support.js";
import { type ArchiveOnStore, startArchiveOnStore } from "../harness/archive-on-store.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  archived,
  expectHeadAndTail,
  generated,
  generator,
  logOf,
  type StatusLog,
  sha256,
} from "../support/archived-lines.js";

const MiB = 1024 * 1024;
const { core } = clients();
let namespace = "";
let archive: ArchiveOnStore;
let controller: RunningController | undefined;

async function podOf(name: string): Promise<{
  spec: {
    volumes: { name: string; secret?: { secretName: string } }[];
    containers: { name: string; volumeMounts?: { name: string }[] }[];
  };
  status: {
    containerStatuses: { name: string; state: { terminated?: { reason: string; exitCode: number } } }[];
  };
}> {
  return JSON.parse((await kubectl(["-n", namespace, "get", "pod", `${name}-1`, "-o", "json"])).stdout);
}

async function secretExists(name: string): Promise<boolean> {
  return core.readNamespacedSecret({ namespace, name }).then(
    () => true,
    () => false,
  );
}

beforeAll(async () => {
  archive = await startArchiveOnStore(inject("binDir"), "rn-archive-runner", {
    node: path.dirname(inject("kubeconfig")),
  });
  expect(archive.controllerOptions.logArchiveUpload).toBe("runner");
  namespace = await createTestNamespace(core, "rn-archive-runner", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
  controller = startController([namespace], { ...realNode.controller, ...archive.controllerOptions });
}, 180_000);
afterAll(async () => {
  await controller?.stop();
  if (namespace) await deleteTestNamespace(core, namespace);
  await archive?.stop();
});

describe("the log archive uploaded by the runner, on a real node", () => {
  it("keeps every byte of 40 MiB printed as fast as it goes, rotated away on the node, with status.log's sha256; the upload Secret reaches the runner alone and goes after", async () => {
    const name = "forty-fast";
    await createPlaybook(namespace, name, { ceiling: "5m", tasks: [{ name: "gen", run: generator(40, 0) }] });
    const ended = await waitForFinished(namespace, name, realNode.taskStartMs + 240_000);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const done = await archived(namespace, name);
    expect(condition(done, "LogArchived")).toMatchObject({ status: "True", reason: "Archived" });
    const log = logOf(done) as StatusLog;
    expect(log.key).toBe(attemptLogKey("", { namespace, name, uid: done.metadata.uid as string }, 1));
    const object = await archive.readObject(log.key);
    expect(object.length).toBe(log.bytes);
    expect(sha256(object)).toBe(log.sha256);
    expect(taskLines(object.toString("utf8"), "gen")).toEqual(generated(40));
    // The segments are gone once composed: the run's folder holds the log, its record and report.
    const client = archive.store.client();
    try {
      const left = await client.listKeys(log.key.replace(/attempt-1\.log$/, ""));
      expect(left.sort()).toEqual(
        [log.key, `${log.key}.json`, log.key.replace(/\.log$/, ".report.json")].sort(),
      );
    } finally {
      client.destroy();
    }
    // Only the runner's container mounts the upload Secret; the Secret goes once the log is composed.
    const pod = await podOf(name);
    const volume = pod.spec.volumes.find((v) => v.secret?.secretName === `${name}-1-log-upload`);
    expect(volume).toBeDefined();
    const mounting = pod.spec.containers.filter((c) => c.volumeMounts?.some((m) => m.name === volume?.name));
    expect(mounting.map((c) => c.name)).toEqual(["runner"]);
    expect(await secretExists(`${name}-1-log-upload`)).toBe(false);
  }, 420_000);

  it("keeps the head, one left-out line and the tail past the policy's archivedLogBytes", async () => {
    const policy = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "PlaybookPolicy",
      metadata: { name: "default", namespace },
      spec: { maximums: { archivedLogBytes: "20Mi" } },
    };
    const applied = await kubectl(["apply", "--server-side", "-f", "-"], { input: JSON.stringify(policy) });
    expect(applied.stderr).toBe("");
    try {
      const name = "capped";
      await createPlaybook(namespace, name, {
        ceiling: "5m",
        tasks: [{ name: "gen", run: generator(40, 0) }],
      });
      const ended = await waitForFinished(namespace, name, realNode.taskStartMs + 240_000);
      expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      const done = await archived(namespace, name);
      const said = condition(done, "LogArchived");
      expect(said).toMatchObject({ status: "False", reason: "CapReached" });
      expect(said?.message).toMatch(/bytes past maximums\.archivedLogBytes \(20971520\) were left out/);
      const log = logOf(done) as StatusLog;
      const object = await archive.readObject(log.key);
      expect(object.length).toBe(log.bytes);
      expect(object.length).toBeLessThanOrEqual(20 * MiB);
      // The cap is used: the head's 8 MiB segment and a tail of almost the rest.
      expect(object.length).toBeGreaterThan(19 * MiB);
      expect(sha256(object)).toBe(log.sha256);
      const text = object.toString("utf8");
      expectHeadAndTail(text, 40);
    } finally {
      await kubectl(["-n", namespace, "delete", "playbookpolicy", "default"]);
    }
  }, 420_000);

  it("ends a run with its true outcome when the store stops mid-run, the runner's memory held: LogArchived False StoreUnreachable", async () => {
    const name = "store-down";
    // 30 MiB over some 30 s: the store goes away after the first segments are in.
    await createPlaybook(namespace, name, {
      ceiling: "5m",
      tasks: [{ name: "gen", run: generator(30, 1000) }],
    });
    // Once the runner's first flush is in the store (its index), the store goes away.
    const client = archive.store.client();
    const deadline = Date.now() + realNode.taskStartMs + 60_000;
    try {
      while (!(await client.listKeys(namespace)).some((key) => key.endsWith(".seg/index.json"))) {
        if (Date.now() > deadline) throw new Error(`${name}'s runner never uploaded`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    } finally {
      client.destroy();
    }
    await archive.store.stop();
    let down = true;
    try {
      // The runner's PUTs are refused while it is down: it stops uploading within its retries'
      // bound (some 3 s) and runs on. The store comes back for the composition.
      await new Promise((resolve) => setTimeout(resolve, 10_000));
      await archive.store.start();
      down = false;
      const ended = await waitForFinished(namespace, name, 240_000);
      expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
      const runner = (await podOf(name)).status.containerStatuses.find((c) => c.name === "runner");
      expect(runner?.state.terminated?.reason).not.toBe("OOMKilled");
      expect(runner?.state.terminated?.exitCode).toBe(0);
      const done = await archived(namespace, name);
      const said = condition(done, "LogArchived");
      expect(said, said?.message).toMatchObject({ status: "False", reason: "StoreUnreachable" });
      // The runner stopped uploading and said why, or (the store slower to come back than the
      // run to end) the store did not take its last word.
      expect(said?.message).toMatch(
        /the runner's upload stopped: |the store did not take the runner's last segment/,
      );
      // What the store took before it went is kept, from the first line on.
      const log = logOf(done) as StatusLog;
      const kept = taskLines((await archive.readObject(log.key)).toString("utf8"), "gen");
      expect(kept.length).toBeGreaterThan(1024);
      expect(kept.length).toBeLessThan(30 * 1024);
      expect(kept.slice(0, -1)).toEqual(generated(30).slice(0, kept.length - 1));
    } finally {
      if (down) await archive.store.start();
    }
  }, 420_000);
});
