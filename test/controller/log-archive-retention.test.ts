// The log goes with the run (issue 58, section 4): with the archive on, a deleted Playbook's
// objects are gone from the store before the Playbook is, and no other run's are touched; a
// CronPlaybook's history limits take their runs' objects with them; a store that stays down holds
// the deletion only up to --log-archive-delete-timeout, then the Playbook goes with a Warning
// naming what was left and playbook_log_archive_failures_total{reason="delete"}; with the archive
// turned off, a Playbook that still carries the finalizer goes at once, with a Warning.
// The archive's writer is another part: the test puts each attempt's objects at the run's keys
// (archive-keys.ts) as an attempt's archive would, on SeaweedFS (test/harness/object-store.ts).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { scheduledRunName } from "../../src/api/cron-playbook.js";
import { LOG_ARCHIVE_FINALIZER } from "../../src/api/log-archive.js";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { attemptLogKey, attemptReportKey, runPrefix } from "../../src/controller/log-archive/archive-keys.js";
import type { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { type ObjectStore, startObjectStore } from "../harness/object-store.js";
import { MovableClock, runsOf } from "./cron-support.js";
import { succeedRun } from "./scripted-runs.js";
import {
  clients,
  createPlaybook,
  eventsOf,
  eventually,
  getPlaybook,
  kubectl,
  podsOf,
  type RunningController,
  startController,
  waitForFinished,
} from "./support.js";

const { core, custom } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];
let stateDir = "";
let store: ObjectStore;
let client: ArchiveStore;
const PREFIX = "logs/";

beforeAll(async () => {
  stateDir = mkdtempSync(path.join(tmpdir(), "archive-retention-"));
  store = await startObjectStore({ binDir: inject("binDir"), stateDir });
  client = store.client(PREFIX);
  // The controller's store takes its keys from the SDK's env, as in the chart's Deployment.
  process.env.AWS_ACCESS_KEY_ID = store.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = store.secretAccessKey;
}, 120_000);

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
  client?.destroy();
  await store?.stop();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

async function namespace(prefix: string) {
  const name = await createTestNamespace(core, prefix);
  namespaces.push(name);
  return name;
}

function archiveOn(ns: string, overrides: Record<string, string | boolean> = {}, clock?: MovableClock) {
  const running = startController(
    [ns],
    {
      logArchiveBucket: store.bucket,
      logArchiveEndpoint: store.endpoint,
      logArchiveForcePathStyle: true,
      logArchivePrefix: PREFIX,
      // The scripted node runs no runner to upload: the controller follows.
      logArchiveUpload: "follow",
      ...overrides,
    },
    undefined,
    clock,
  );
  controllers.push(running);
  return running;
}

const TASKS = [{ name: "a", run: "true" }];
const finalizersOf = (p: { metadata: object }) => (p.metadata as { finalizers?: string[] }).finalizers ?? [];

/** The run's folder as an attempt's archive leaves it: the attempt's log and its report. */
async function archiveAttempt(run: { namespace: string; name: string; uid: string }): Promise<string> {
  await client.putObject(attemptLogKey(PREFIX, run, 1), `[a] output of ${run.name}\n`, "text/plain");
  await client.putObject(attemptReportKey(PREFIX, run, 1), "{}", "application/json");
  const prefix = runPrefix(PREFIX, run);
  expect(await client.listKeys(prefix)).toHaveLength(2);
  return prefix;
}

async function gone(ns: string, name: string, timeoutMs = 30_000): Promise<void> {
  await eventually(
    `playbook ${ns}/${name} to be gone`,
    async () => {
      try {
        await getPlaybook(ns, name);
        return undefined;
      } catch (error) {
        return (error as { code?: number }).code === 404 ? true : undefined;
      }
    },
    timeoutMs,
  );
}

async function deletionFailures(running: RunningController): Promise<number> {
  const metric = await running.controller.metrics.logArchiveFailures.get();
  return metric.values.find((v) => v.labels.reason === "delete")?.value ?? 0;
}

describe("a run's archived objects, with the archive on", () => {
  it("carry the finalizer from before the first pod, and go with the Playbook, leaving other runs' objects", async () => {
    const ns = await namespace("archive-delete");
    archiveOn(ns);
    const created = await createPlaybook(ns, "nightly", { tasks: TASKS });
    const run = { namespace: ns, name: "nightly", uid: created.metadata.uid };
    await eventually("the run's pod", async () =>
      (await podsOf(ns, "nightly")).length > 0 ? true : undefined,
    );
    expect(finalizersOf(await getPlaybook(ns, "nightly"))).toContain(LOG_ARCHIVE_FINALIZER);
    const prefix = await archiveAttempt(run);
    // A run of the same name before it (another UID), and one whose name starts with this one's.
    const earlier = await archiveAttempt({ ...run, uid: "00000000-0000-4000-8000-000000000000" });
    const longer = await archiveAttempt({ ...run, name: "nightly-2" });

    await kubectl(["-n", ns, "delete", "playbook", "nightly", "--wait=false"]);
    await gone(ns, "nightly");
    expect(await client.listKeys(prefix)).toEqual([]);
    expect(await client.listKeys(earlier)).toHaveLength(2);
    expect(await client.listKeys(longer)).toHaveLength(2);
  });

  it("go with the runs a CronPlaybook's history limit deletes", async () => {
    const ns = await namespace("archive-cron");
    const clock = new MovableClock();
    const running = archiveOn(ns, {}, clock);
    const cron = (await custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      plural: "cronplaybooks",
      namespace: ns,
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "CronPlaybook",
        metadata: { name: "history" },
        spec: { schedule: "0 * * * *", successfulRunsHistoryLimit: 1, template: { spec: { tasks: TASKS } } },
      },
    })) as { metadata: { creationTimestamp: string } };
    const created = Date.parse(cron.metadata.creationTimestamp);
    const folders: string[] = [];
    const names: string[] = [];
    for (const hour of [1, 2]) {
      const at = new Date((Math.floor(created / 3_600_000) + hour) * 3_600_000);
      clock.moveTo(new Date(at.getTime() + 5_000));
      running.controller.resync();
      const name = scheduledRunName("history", at);
      names.push(name);
      await succeedRun(core, ns, name);
      const run = await waitForFinished(ns, name);
      folders.push(await archiveAttempt({ namespace: ns, name, uid: run.metadata.uid }));
    }
    await eventually("only the latest run to be kept", async () =>
      JSON.stringify(await runsOf(ns, "history")) === JSON.stringify([names[1]]) ? true : undefined,
    );
    expect(await client.listKeys(folders[0] ?? "")).toEqual([]);
    expect(await client.listKeys(folders[1] ?? "")).toHaveLength(2);
  });
});

describe("a deleted Playbook's finalizer", () => {
  it("lets the Playbook go at once when the archive is off, saying its objects were left", async () => {
    const ns = await namespace("archive-off");
    controllers.push(startController([ns]));
    await kubectl(["-n", ns, "apply", "-f", "-"], {
      input: JSON.stringify({
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "Playbook",
        metadata: { name: "before", finalizers: [LOG_ARCHIVE_FINALIZER] },
        spec: { tasks: TASKS },
      }),
    });
    const uid = (await getPlaybook(ns, "before")).metadata.uid;
    await kubectl(["-n", ns, "delete", "playbook", "before", "--wait=false"]);
    await gone(ns, "before");
    const events = await eventsOf(ns, "before", ["LogArchiveLeft"]);
    expect(events.find((e) => e.reason === "LogArchiveLeft")?.message).toBe(
      `the log archive is off: this run's archived objects, if any, were left under ${ns}/before/${uid}/`,
    );
  });

  it("gives up after --log-archive-delete-timeout while the store is down: a Warning naming the folder, the metric, no finalizer left", async () => {
    const ns = await namespace("archive-down");
    const running = archiveOn(ns, { logArchiveDeleteTimeout: "8s" });
    const created = await createPlaybook(ns, "stuck", { tasks: TASKS });
    const run = { namespace: ns, name: "stuck", uid: created.metadata.uid };
    await eventually("the run's pod", async () =>
      (await podsOf(ns, "stuck")).length > 0 ? true : undefined,
    );
    const prefix = await archiveAttempt(run);
    expect(await deletionFailures(running)).toBe(0);

    await store.stop();
    const deletedAt = Date.now();
    await kubectl(["-n", ns, "delete", "playbook", "stuck", "--wait=false"]);
    // Held while the bound runs: the finalizer is still there a few seconds in.
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    expect(finalizersOf(await getPlaybook(ns, "stuck"))).toContain(LOG_ARCHIVE_FINALIZER);
    await gone(ns, "stuck", 60_000);
    // Counted from the deletionTimestamp, which the API server keeps in whole seconds.
    expect(Date.now() - deletedAt).toBeGreaterThanOrEqual(7_000);

    const events = await eventsOf(ns, "stuck", ["LogArchiveDeleteFailed"]);
    const warning = events.find((e) => e.reason === "LogArchiveDeleteFailed");
    expect(warning?.type).toBe("Warning");
    expect(warning?.message).toContain(`objects under ${prefix} were left in the store; last error: `);
    expect(await deletionFailures(running)).toBe(1);
    const text = await running.controller.metrics.registry.metrics();
    expect(text).toContain('playbook_log_archive_failures_total{reason="delete"} 1');
  }, 120_000);
});
