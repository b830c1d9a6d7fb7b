// CronPlaybook concurrency against the real API server when something goes wrong around it
// (issue 33): Replace whose replacement a ResourceQuota refuses keeps the run it would have
// cancelled, and a controller that has just taken over with a Playbook cache that has not seen the
// active run still skips a time under Forbid.
import { pino } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import {
  ANNOTATION_SCHEDULED_AT,
  CRON_PLURAL,
  LABEL_CRON_PLAYBOOK,
  scheduledRunName,
} from "../../src/api/cron-playbook.js";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { CronController } from "../../src/controller/cron/cron-controller.js";
import { EventRecorder, eventApiOf } from "../../src/runtime/events.js";
import { makeClients } from "../../src/runtime/kube-config.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { SETTINGS } from "../unit/controller-fixtures.js";
import { cronEvents, MovableClock, runsOf } from "./cron-support.js";
import {
  clients,
  eventually,
  getPlaybook,
  type RunningController,
  sleep,
  startController,
} from "./support.js";

const { core, custom, kubeConfig } = clients();
const namespaces: string[] = [];
const stops: (() => Promise<void>)[] = [];

afterAll(async () => {
  await Promise.all(stops.map((stop) => stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

async function namespace(prefix: string) {
  const name = await createTestNamespace(core, prefix);
  namespaces.push(name);
  return name;
}

const cronApi = { group: GROUP, version: VERSION, plural: CRON_PLURAL };
const at = (date: Date) => date.toISOString().replace(".000Z", "Z");

interface CronObject {
  apiVersion: string;
  metadata: { name: string; creationTimestamp: string; uid: string };
  status?: { lastScheduleTime?: string };
}

async function createCron(ns: string, name: string, spec: Record<string, unknown>): Promise<CronObject> {
  return (await custom.createNamespacedCustomObject({
    ...cronApi,
    namespace: ns,
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "CronPlaybook",
      metadata: { name },
      spec: { template: { spec: { tasks: [{ name: "backup", run: "true" }] } }, ...spec },
    },
  })) as CronObject;
}

async function getCron(ns: string, name: string): Promise<CronObject> {
  return (await custom.getNamespacedCustomObject({ ...cronApi, namespace: ns, name })) as CronObject;
}

/** The top of the hour `hours` after the CronPlaybook's creation (the first is 1). */
function hourAfter(cron: CronObject, hours: number): Date {
  const created = Date.parse(cron.metadata.creationTimestamp);
  return new Date((Math.floor(created / 3_600_000) + hours) * 3_600_000);
}

describe("a CronPlaybook with concurrencyPolicy Replace", () => {
  it("keeps the active run when the API server refuses its replacement (a ResourceQuota), and says so", async () => {
    const ns = await namespace("cron-quota");
    const clock = new MovableClock();
    const running: RunningController = startController([ns], {}, undefined, clock);
    stops.push(() => running.stop());
    const cron = await createCron(ns, "replace", { schedule: "0 * * * *", concurrencyPolicy: "Replace" });
    const first = hourAfter(cron, 1);
    clock.moveTo(new Date(first.getTime() + 5_000));
    running.controller.resync();
    const firstRun = scheduledRunName("replace", first);
    await eventually("the first run", async () =>
      (await runsOf(ns, "replace")).includes(firstRun) ? true : undefined,
    );

    // One Playbook in the namespace, the first run: the quota controller counts it.
    await core.createNamespacedResourceQuota({
      namespace: ns,
      body: { metadata: { name: "one-playbook" }, spec: { hard: { [`count/${PLURAL}.${GROUP}`]: "1" } } },
    });
    await eventually(
      "the quota to count the first run",
      async () => {
        const quota = await core.readNamespacedResourceQuota({ namespace: ns, name: "one-playbook" });
        return quota.status?.used?.[`count/${PLURAL}.${GROUP}`] === "1" ? true : undefined;
      },
      60_000,
    );

    const second = hourAfter(cron, 2);
    const secondRun = scheduledRunName("replace", second);
    clock.moveTo(new Date(second.getTime() + 5_000));
    running.controller.resync();
    const [refused] = await cronEvents(ns, "replace", "FailedCreate");
    expect(refused?.type).toBe("Warning");
    expect(refused?.message).toMatch(
      new RegExp(
        `^Kept run ${firstRun}: concurrencyPolicy Replace, but its replacement ${secondRun} was refused: .*exceeded quota: one-playbook`,
      ),
    );
    await eventually("the second time to be handled", async () =>
      (await getCron(ns, "replace")).status?.lastScheduleTime === at(second) ? true : undefined,
    );
    await sleep(1_000);
    const kept = await getPlaybook(ns, firstRun);
    expect((kept.spec as { cancel?: boolean }).cancel).not.toBe(true);
    expect(
      (kept.metadata as { annotations?: Record<string, string> }).annotations?.["playbook.dev/cancel-reason"],
    ).toBeUndefined();
    expect(await runsOf(ns, "replace")).toEqual([firstRun]);
  });
});

describe("a controller that has just taken the Lease", () => {
  it("under Forbid skips a time while a run is active that its Playbook cache has not shown", async () => {
    const ns = await namespace("cron-takeover");
    const cron = await createCron(ns, "forbid", { schedule: "0 * * * *", concurrencyPolicy: "Forbid" });
    // The run the previous leader started, still running.
    const earlier = new Date(Date.parse(cron.metadata.creationTimestamp) - 60_000);
    const activeRun = scheduledRunName("forbid", earlier);
    await custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      plural: PLURAL,
      namespace: ns,
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "Playbook",
        metadata: {
          name: activeRun,
          labels: { [LABEL_CRON_PLAYBOOK]: "forbid" },
          annotations: { [ANNOTATION_SCHEDULED_AT]: at(earlier) },
          ownerReferences: [
            {
              apiVersion: cron.apiVersion,
              kind: "CronPlaybook",
              name: "forbid",
              uid: cron.metadata.uid,
              controller: true,
            },
          ],
        },
        spec: { tasks: [{ name: "backup", run: "true" }] },
      },
    });

    // The new leader's CronPlaybook controller; its Playbook cache lags: it shows no run at all.
    const clock = new MovableClock();
    const due = hourAfter(cron, 1);
    clock.moveTo(new Date(due.getTime() + 5_000));
    const api = makeClients(kubeConfig);
    const log = pino({ level: "silent" });
    const events = new EventRecorder(eventApiOf(api.api), "cron-takeover-test", log);
    const controller = new CronController({
      namespaces: [ns],
      clients: api,
      log,
      clock,
      events,
      settings: SETTINGS,
      watchTimeoutMs: 60_000,
      resyncMs: 600_000,
      playbooksIn: () => [],
      rulesFor: () => undefined,
      onProblemChange: () => {},
      onReconnect: () => {},
      onRelist: () => {},
    });
    const informers = [...controller.informers.values()];
    for (const informer of informers) informer.start();
    await Promise.all(informers.map((informer) => informer.waitForSync()));
    const leading = new AbortController();
    controller.startWorkers(1, leading.signal);
    stops.push(async () => {
      leading.abort();
      await controller.drain();
      await Promise.all(informers.map((informer) => informer.stop()));
    });

    await eventually("the due time to be handled", async () =>
      (await getCron(ns, "forbid")).status?.lastScheduleTime === at(due) ? true : undefined,
    );
    expect(await runsOf(ns, "forbid")).toEqual([activeRun]);
    await events.flush();
    const [skipped] = await cronEvents(ns, "forbid", "RunSkipped");
    expect(skipped?.message).toBe(
      `Skipped the run scheduled at ${at(due)}: concurrencyPolicy Forbid and run ${activeRun} has not finished`,
    );
  });
});
