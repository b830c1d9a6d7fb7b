// CronPlaybooks on the real API server. The schedule is read against a clock the test moves (the
// controller's scheduleClock; its Playbook runs keep the real clock), and a resync makes the
// controller look at once, so an hourly schedule's times come in seconds; one test waits for a
// real minute. The runs' pods are bound to the scripted node: the tests write their lives.
import { afterAll, describe, expect, it } from "vitest";
import {
  ANNOTATION_SCHEDULED_AT,
  ANNOTATION_TRIGGER,
  CRON_PLURAL,
  LABEL_CRON_PLAYBOOK,
  manualRunName,
  scheduledRunName,
} from "../../src/api/cron-playbook.js";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import type { Clock } from "../../src/runtime/clock.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { exceedDeadline } from "../harness/scripted-node.js";
import { cronEvents, MovableClock, runsOf } from "./cron-support.js";
import { podOf, succeedRun } from "./scripted-runs.js";
import {
  clients,
  condition,
  eventually,
  getPlaybook,
  kubectl,
  kubectlResult,
  type RunningController,
  sleep,
  startController,
  waitForFinished,
} from "./support.js";

const { core, custom } = clients();
const namespaces: string[] = [];
const controllers: RunningController[] = [];

afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  await Promise.all(namespaces.map((n) => deleteTestNamespace(core, n)));
});

async function namespace(prefix: string) {
  const name = await createTestNamespace(core, prefix);
  namespaces.push(name);
  return name;
}

function controllerFor(ns: string, clock?: Clock, overrides: Record<string, string | boolean> = {}) {
  const running = startController([ns], overrides, undefined, clock);
  controllers.push(running);
  return running;
}

const TASKS = [{ name: "backup", run: "true" }];

interface CronObject {
  metadata: { name: string; creationTimestamp: string; uid: string };
  status?: {
    active?: { name: string }[];
    lastScheduleTime?: string;
    lastSuccessfulTime?: string;
    missedRuns?: number;
    lastTrigger?: { id: string; run?: string; skipped?: string };
    conditions?: { type: string; status: string; reason: string; message: string }[];
  };
}

async function createCron(ns: string, name: string, spec: Record<string, unknown>): Promise<CronObject> {
  return (await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: CRON_PLURAL,
    namespace: ns,
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "CronPlaybook",
      metadata: { name },
      spec: { template: { spec: { tasks: TASKS } }, ...spec },
    },
  })) as CronObject;
}

async function getCron(ns: string, name: string): Promise<CronObject> {
  return (await custom.getNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: CRON_PLURAL,
    namespace: ns,
    name,
  })) as CronObject;
}

async function waitForCron(ns: string, name: string, what: string, check: (cron: CronObject) => boolean) {
  return eventually(`cronplaybook ${ns}/${name} ${what}`, async () => {
    const cron = await getCron(ns, name);
    return check(cron) ? cron : undefined;
  });
}

const readyOf = (cron: CronObject) => cron.status?.conditions?.find((c) => c.type === "Ready");

/** The top of the hour `hours` after the CronPlaybook's creation (the first is 1). */
function hourAfter(cron: CronObject, hours: number): Date {
  const created = Date.parse(cron.metadata.creationTimestamp);
  return new Date((Math.floor(created / 3_600_000) + hours) * 3_600_000);
}

/** Moves the schedule clock a few seconds past `at` and has the controller look at once. */
function moveTo(clock: MovableClock, running: RunningController, at: Date): void {
  clock.moveTo(new Date(at.getTime() + 5_000));
  running.controller.resync();
}

describe("a CronPlaybook", () => {
  it("starts a run at its scheduled time, named from it, labelled, annotated and owned", async () => {
    const ns = await namespace("cron-schedule");
    const clock = new MovableClock();
    const running = controllerFor(ns, clock);
    const cron = await createCron(ns, "hourly", { schedule: "0 * * * *" });
    await waitForCron(ns, "hourly", "to be Ready", (c) => readyOf(c)?.status === "True");
    expect(await runsOf(ns, "hourly")).toEqual([]);

    const at = hourAfter(cron, 1);
    moveTo(clock, running, at);
    const name = scheduledRunName("hourly", at);
    const seen = await waitForCron(
      ns,
      "hourly",
      "to list its run",
      (c) => c.status?.active?.[0]?.name === name,
    );
    expect(seen.status?.lastScheduleTime).toBe(at.toISOString().replace(".000Z", "Z"));
    const run = await getPlaybook(ns, name);
    const meta = run.metadata as typeof run.metadata & {
      labels: Record<string, string>;
      annotations: Record<string, string>;
      ownerReferences: {
        kind: string;
        name: string;
        uid: string;
        controller: boolean;
        blockOwnerDeletion: boolean;
      }[];
    };
    expect(meta.labels[LABEL_CRON_PLAYBOOK]).toBe("hourly");
    expect(meta.annotations[ANNOTATION_SCHEDULED_AT]).toBe(at.toISOString().replace(".000Z", "Z"));
    expect(meta.ownerReferences).toEqual([
      expect.objectContaining({
        kind: "CronPlaybook",
        name: "hourly",
        uid: cron.metadata.uid,
        controller: true,
        blockOwnerDeletion: true,
      }),
    ]);
    expect(run.spec).toMatchObject({ tasks: TASKS });
    const started = await cronEvents(ns, "hourly", "RunStarted");
    expect(started[0]?.message).toBe(
      `Created run ${name} scheduled at ${at.toISOString().replace(".000Z", "Z")}`,
    );

    const { stdout } = await kubectl(["-n", ns, "get", "cpb", "hourly"]);
    expect(stdout).toMatch(
      /NAME\s+SCHEDULE\s+TIME ZONE\s+SUSPENDED\s+ACTIVE\s+LAST SCHEDULE\s+LAST SUCCESS\s+AGE/,
    );
    expect(stdout).toMatch(/0 \* \* \* \*\s+UTC\s+false/);
    expect(stdout).toContain(name);

    // Deleting the CronPlaybook removes its runs (owner references, the garbage collector).
    await kubectl(["-n", ns, "delete", "cpb", "hourly", "--wait=false"]);
    await eventually(
      "the runs to go with their CronPlaybook",
      async () => ((await runsOf(ns, "hourly")).length === 0 ? true : undefined),
      60_000,
    );
  });

  it("with Forbid skips a time while a run is active", async () => {
    const ns = await namespace("cron-forbid");
    const clock = new MovableClock();
    const running = controllerFor(ns, clock);
    const cron = await createCron(ns, "forbid", { schedule: "0 * * * *", concurrencyPolicy: "Forbid" });
    const first = hourAfter(cron, 1);
    moveTo(clock, running, first);
    await eventually("the first run", async () =>
      (await runsOf(ns, "forbid")).length === 1 ? true : undefined,
    );

    const second = hourAfter(cron, 2);
    moveTo(clock, running, second);
    const seen = await waitForCron(
      ns,
      "forbid",
      "to handle the second time",
      (c) => c.status?.lastScheduleTime === second.toISOString().replace(".000Z", "Z"),
    );
    expect(await runsOf(ns, "forbid")).toEqual([scheduledRunName("forbid", first)]);
    expect(seen.status?.active).toEqual([{ name: scheduledRunName("forbid", first) }]);
    const skipped = await cronEvents(ns, "forbid", "RunSkipped");
    expect(skipped[0]?.message).toBe(
      `Skipped the run scheduled at ${second.toISOString().replace(".000Z", "Z")}: concurrencyPolicy Forbid and run ${scheduledRunName("forbid", first)} has not finished`,
    );
  });

  it("with Replace cancels the active run, which ends Cancelled naming the run that replaced it", async () => {
    const ns = await namespace("cron-replace");
    const clock = new MovableClock();
    const running = controllerFor(ns, clock);
    const cron = await createCron(ns, "replace", { schedule: "0 * * * *", concurrencyPolicy: "Replace" });
    const first = hourAfter(cron, 1);
    moveTo(clock, running, first);
    const firstRun = scheduledRunName("replace", first);
    const pod = await podOf(core, ns, firstRun);

    const second = hourAfter(cron, 2);
    moveTo(clock, running, second);
    const secondRun = scheduledRunName("replace", second);
    await eventually("the first run to be cancelled", async () =>
      ((await getPlaybook(ns, firstRun)).spec as { cancel?: boolean }).cancel === true ? true : undefined,
    );
    // The kubelet stops the pod at its lowered deadline.
    await exceedDeadline(core, pod);
    const ended = await waitForFinished(ns, firstRun);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "False", reason: "Cancelled" });
    expect(condition(ended, "Succeeded")?.message).toMatch(
      new RegExp(`^replaced by run ${secondRun} \\(CronPlaybook replace, concurrencyPolicy Replace\\); `),
    );
    expect(await runsOf(ns, "replace")).toEqual([firstRun, secondRun].sort());
    await cronEvents(ns, "replace", "RunReplaced");
  });

  it("started once for a time it was down across, the earlier time missed (controller restarted)", async () => {
    const ns = await namespace("cron-restart");
    const clock = new MovableClock();
    const first = controllerFor(ns, clock);
    const cron = await createCron(ns, "restart", { schedule: "0 * * * *", startingDeadlineSeconds: 300 });
    await waitForCron(ns, "restart", "to be Ready", (c) => readyOf(c)?.status === "True");
    await first.stop();

    // Down across two scheduled times: the later one, within its starting deadline, starts.
    const later = hourAfter(cron, 2);
    clock.moveTo(new Date(later.getTime() + 60_000));
    const second = controllerFor(ns, clock);
    const name = scheduledRunName("restart", later);
    const seen = await waitForCron(
      ns,
      "restart",
      "to start the later time",
      (c) => c.status?.active?.[0]?.name === name,
    );
    expect(seen.status?.missedRuns).toBe(1);
    const missed = await cronEvents(ns, "restart", "MissedSchedule");
    expect(missed[0]?.message).toContain("Missed 1 scheduled time since");

    // A third controller taking over at the same time starts nothing more.
    await second.stop();
    const third = controllerFor(ns, clock);
    await eventually("the third controller to lead", async () =>
      (await third.controller.metrics.isLeader.get()).values[0]?.value === 1 ? true : undefined,
    );
    third.controller.resync();
    await sleep(2_000);
    expect(await runsOf(ns, "restart")).toEqual([name]);
    expect((await getCron(ns, "restart")).status?.missedRuns).toBe(1);
  });

  it("is started once by two controllers that both reconcile it (no leader election)", async () => {
    const ns = await namespace("cron-twice");
    const clock = new MovableClock();
    const one = controllerFor(ns, clock, { leaderElection: false });
    const two = controllerFor(ns, clock, { leaderElection: false });
    const cron = await createCron(ns, "twice", { schedule: "0 * * * *" });
    await waitForCron(ns, "twice", "to be Ready", (c) => readyOf(c)?.status === "True");
    const at = hourAfter(cron, 1);
    clock.moveTo(new Date(at.getTime() + 5_000));
    one.controller.resync();
    two.controller.resync();
    const name = scheduledRunName("twice", at);
    await waitForCron(ns, "twice", "to list its run", (c) => c.status?.active?.[0]?.name === name);
    await sleep(2_000);
    expect(await runsOf(ns, "twice")).toEqual([name]);
    const started = await cronEvents(ns, "twice", "RunStarted");
    expect(started.reduce((sum, e) => sum + (e.count ?? 1), 0)).toBeLessThanOrEqual(2);
  });

  it("does not take over a Playbook that holds its run's name: event RunNameTaken", async () => {
    const ns = await namespace("cron-taken");
    const clock = new MovableClock();
    const running = controllerFor(ns, clock);
    const cron = await createCron(ns, "taken", { schedule: "0 * * * *", suspend: true });
    const at = hourAfter(cron, 1);
    const name = scheduledRunName("taken", at);
    await kubectl(["-n", ns, "apply", "-f", "-"], {
      input: JSON.stringify({
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "Playbook",
        metadata: { name, labels: { [LABEL_CRON_PLAYBOOK]: "taken" } },
        spec: { tasks: TASKS },
      }),
    });
    await kubectl(["-n", ns, "patch", "cpb", "taken", "--type=merge", "-p", '{"spec":{"suspend":false}}']);
    await waitForCron(
      ns,
      "taken",
      "to resume",
      (c) => readyOf(c)?.message.startsWith("the schedule") === true,
    );
    moveTo(clock, running, at);
    const taken = await cronEvents(ns, "taken", "RunNameTaken");
    expect(taken[0]?.message).toBe(
      `Could not create run ${name}: a Playbook of that name exists and it has no controller owner`,
    );
    const playbook = await getPlaybook(ns, name);
    expect((playbook.metadata as { ownerReferences?: unknown }).ownerReferences).toBeUndefined();
    expect((await getCron(ns, "taken")).status?.active ?? []).toEqual([]);
  });

  it("trims its history: older succeeded runs past successfulRunsHistoryLimit are deleted", async () => {
    const ns = await namespace("cron-history");
    const clock = new MovableClock();
    const running = controllerFor(ns, clock);
    const cron = await createCron(ns, "history", { schedule: "0 * * * *", successfulRunsHistoryLimit: 1 });
    const names: string[] = [];
    for (const hour of [1, 2, 3]) {
      const at = hourAfter(cron, hour);
      moveTo(clock, running, at);
      const name = scheduledRunName("history", at);
      names.push(name);
      await succeedRun(core, ns, name);
      await waitForFinished(ns, name);
    }
    await eventually("only the latest run to be kept", async () =>
      JSON.stringify(await runsOf(ns, "history")) === JSON.stringify([names[2]]) ? true : undefined,
    );
    const seen = await waitForCron(
      ns,
      "history",
      "to record the last success",
      (c) => c.status?.lastSuccessfulTime !== undefined,
    );
    expect(seen.status?.active ?? []).toEqual([]);
  });

  it("starts a run now for a trigger annotation, and records it", async () => {
    const ns = await namespace("cron-trigger");
    const running = controllerFor(ns);
    await createCron(ns, "trigger", { schedule: "@yearly", suspend: true });
    const id = `${new Date().toISOString()}-0a1b2c3d`;
    await kubectl(["-n", ns, "annotate", "cpb", "trigger", `${ANNOTATION_TRIGGER}=${id}`]);
    const seen = await waitForCron(
      ns,
      "trigger",
      "to handle the trigger",
      (c) => c.status?.lastTrigger?.id === id,
    );
    expect(seen.status?.lastTrigger?.run).toBe(manualRunName("trigger", id));
    expect(await runsOf(ns, "trigger")).toEqual([manualRunName("trigger", id)]);
    expect(running.controller.ready).toBe(true);
  });

  it("with * * * * * starts a run within a minute on the real clock", async () => {
    const ns = await namespace("cron-minute");
    controllerFor(ns);
    await createCron(ns, "minutely", { schedule: "* * * * *" });
    await eventually(
      "a run on the real clock",
      async () => ((await runsOf(ns, "minutely")).length > 0 ? true : undefined),
      75_000,
    );
  }, 90_000);
});

describe("a CronPlaybook's refused fields", () => {
  it.each([
    ["a schedule of four fields", { schedule: "0 3 * *" }, "spec.schedule"],
    ["a time zone that is not a name", { schedule: "@daily", timeZone: "Europe Berlin" }, "spec.timeZone"],
  ])("%s is refused by the CRD, naming the field", async (_name, spec, field) => {
    const ns = await namespace("cron-refused");
    const manifest = JSON.stringify({
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "CronPlaybook",
      metadata: { name: "bad", namespace: ns },
      spec: { template: { spec: { tasks: TASKS } }, ...spec },
    });
    const result = await kubectlResult(["apply", "-f", "-"], manifest);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(field);
  });

  it.each([
    [
      "a minute of 61",
      { schedule: "61 * * * *" },
      "InvalidSchedule",
      'spec.schedule: "61 * * * *" is not a schedule',
    ],
    [
      "an unknown time zone",
      { schedule: "@daily", timeZone: "Mars/Olympus" },
      "InvalidTimeZone",
      'spec.timeZone: "Mars/Olympus"',
    ],
    [
      "a template the namespace policy refuses",
      { schedule: "@daily", template: { spec: { tasks: TASKS, serviceAccountName: "deployer" } } },
      "PolicyViolation",
      "spec.template.spec.serviceAccountName",
    ],
  ])(
    "%s is refused by the controller: Ready False naming the field",
    async (_name, spec, reason, message) => {
      const ns = await namespace("cron-invalid");
      controllerFor(ns);
      await createCron(ns, "bad", spec);
      const seen = await waitForCron(
        ns,
        "bad",
        `to be refused (${reason})`,
        (c) => readyOf(c)?.status === "False",
      );
      expect(readyOf(seen)).toMatchObject({ reason });
      expect(readyOf(seen)?.message).toContain(message);
      await cronEvents(ns, "bad", reason);
    },
  );

  it("is documented for kubectl explain", async () => {
    const { stdout } = await kubectl(["explain", "cronplaybooks.spec.concurrencyPolicy"]);
    expect(stdout.replace(/\s+/g, " ")).toContain("Replace cancels the running ones");
  });
});
