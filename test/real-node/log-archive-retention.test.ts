// The Playbook is deleted: its objects are gone (issue 58, section 6), on a real kubelet. A run
// ends on the node; its runner's log, as the kubelet kept it, and its report are put at the run's
// keys (archive-keys.ts) as an attempt's archive leaves them (the archive's writer is another
// part); then the Playbook is deleted and the store holds nothing of it, its pod goes after it,
// and another run's folder is untouched.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { LOG_ARCHIVE_FINALIZER } from "../../src/api/log-archive.js";
import { attemptLogKey, attemptReportKey, runPrefix } from "../../src/controller/log-archive/archive-keys.js";
import type { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import {
  clients,
  condition,
  createPlaybook,
  eventually,
  getPlaybook,
  kubectl,
  podsOf,
  type RunningController,
  runnerLogs,
  startController,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { type ObjectStore, startObjectStore } from "../harness/object-store.js";

const { core } = clients();
const PREFIX = "logs/";
let namespace = "";
let stateDir = "";
let store: ObjectStore;
let client: ArchiveStore;
const controllers: RunningController[] = [];

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-archive", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
  stateDir = mkdtempSync(path.join(tmpdir(), "rn-archive-"));
  store = await startObjectStore({ binDir: inject("binDir"), stateDir });
  client = store.client(PREFIX);
  process.env.AWS_ACCESS_KEY_ID = store.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = store.secretAccessKey;
}, 120_000);

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  if (namespace) await deleteTestNamespace(core, namespace);
  client?.destroy();
  await store?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

describe("a deleted Playbook's archived log on a real node", () => {
  it("is gone from the store before the Playbook is, and its pod goes after it", async () => {
    controllers.push(
      startController([namespace], {
        logArchiveBucket: store.bucket,
        logArchiveEndpoint: store.endpoint,
        logArchiveForcePathStyle: true,
        logArchivePrefix: PREFIX,
        // The store is on this machine's loopback, out of the node's pods' reach: the controller follows.
        logArchiveUpload: "follow",
      }),
    );
    const created = await createPlaybook(namespace, "kept", {
      tasks: [{ name: "say", run: "echo archived line" }],
    });
    const ended = await waitForFinished(namespace, "kept", 180_000);
    expect(condition(ended, "Succeeded")?.reason).toBe("Succeeded");
    expect((ended.metadata as { finalizers?: string[] }).finalizers).toContain(LOG_ARCHIVE_FINALIZER);

    const run = { namespace, name: "kept", uid: created.metadata.uid };
    const log = await runnerLogs(namespace, "kept");
    expect(log).toContain("[say] archived line");
    await client.putObject(attemptLogKey(PREFIX, run, 1), log, "text/plain");
    await client.putObject(attemptReportKey(PREFIX, run, 1), "{}", "application/json");
    const other = { ...run, uid: "00000000-0000-4000-8000-000000000001" };
    await client.putObject(attemptLogKey(PREFIX, other, 1), "another run\n", "text/plain");
    // The archive's writer keeps its own record beside the log (attempt-1.log.json) too.
    expect(await client.listKeys(runPrefix(PREFIX, run))).toEqual(
      expect.arrayContaining([attemptLogKey(PREFIX, run, 1), attemptReportKey(PREFIX, run, 1)]),
    );

    await kubectl(["-n", namespace, "delete", "playbook", "kept", "--wait=false"]);
    await eventually(
      "the Playbook to be gone",
      async () => {
        try {
          await getPlaybook(namespace, "kept");
          return undefined;
        } catch (error) {
          return (error as { code?: number }).code === 404 ? true : undefined;
        }
      },
      60_000,
    );
    expect(await client.listKeys(runPrefix(PREFIX, run))).toEqual([]);
    expect(await client.listUploads(runPrefix(PREFIX, run))).toEqual([]);
    expect(await client.listKeys(runPrefix(PREFIX, other))).toHaveLength(1);
    await eventually(
      "the run's pod to be gone",
      async () => ((await podsOf(namespace, "kept")).length === 0 ? true : undefined),
      120_000,
    );
  }, 300_000);
});
