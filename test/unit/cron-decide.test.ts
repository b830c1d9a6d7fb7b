// The CronPlaybook scheduling decision as a table with an injected clock, as the CronJob
// controller's tests are: every concurrency policy, starting deadlines, downtime, DST, suspend,
// history, "run now" and the namespace policy.

import { describe, expect, it } from "vitest";
import {
  ANNOTATION_SCHEDULED_AT,
  ANNOTATION_TRIGGER,
  ANNOTATION_TRIGGERED_BY,
  type CronPlaybookStatus,
  LABEL_CRON_PLAYBOOK,
  manualRunName,
  scheduledRunName,
} from "../../src/api/cron-playbook.js";
import { dueTimes, readSchedule } from "../../src/api/cron-schedule.js";
import { clusterRules } from "../../src/api/policy.js";
import type { StoredCronPlaybook } from "../../src/controller/cron/cron-objects.js";
import { type CronDecision, type CronInput, decideCron } from "../../src/controller/cron/decide-cron.js";
import type { StoredPlaybook } from "../../src/controller/objects.js";
import { governed, SETTINGS } from "./controller-fixtures.js";

const CREATED = "2026-01-01T00:00:00Z";
const TEMPLATE = { spec: { tasks: [{ name: "backup", run: "backup.sh" }] } };

function cron(
  spec: Record<string, unknown> = {},
  status?: CronPlaybookStatus,
  annotations?: Record<string, string>,
) {
  return {
    apiVersion: "playbook.dev/v1alpha1",
    kind: "CronPlaybook",
    metadata: {
      name: "nightly",
      namespace: "ops",
      uid: "cron-uid",
      generation: 1,
      resourceVersion: "5",
      creationTimestamp: CREATED,
      ...(annotations ? { annotations } : {}),
    },
    spec: { schedule: "0 3 * * *", template: TEMPLATE, ...spec },
    ...(status ? { status } : {}),
  } satisfies StoredCronPlaybook;
}

type Ending = "running" | "Succeeded" | "Failed" | "Cancelled";

/** A run of the CronPlaybook scheduled at `scheduledAt`, running or ended (at `endedAt`). */
function run(
  scheduledAt: string,
  ending: Ending = "running",
  endedAt?: string,
  cancel = false,
): StoredPlaybook {
  const at = new Date(scheduledAt);
  const finished = ending !== "running";
  return {
    apiVersion: "playbook.dev/v1alpha1",
    kind: "Playbook",
    metadata: {
      name: scheduledRunName("nightly", at),
      namespace: "ops",
      uid: `run-${at.getTime()}`,
      labels: { [LABEL_CRON_PLAYBOOK]: "nightly" },
      annotations: { [ANNOTATION_SCHEDULED_AT]: scheduledAt },
      ownerReferences: [
        {
          apiVersion: "playbook.dev/v1alpha1",
          kind: "CronPlaybook",
          name: "nightly",
          uid: "cron-uid",
          controller: true,
        },
      ],
    },
    spec: { ...TEMPLATE.spec, cancel },
    status: finished
      ? {
          phase: ending === "Succeeded" ? "Succeeded" : ending === "Cancelled" ? "Cancelled" : "Failed",
          completionTime: endedAt ?? scheduledAt,
          conditions: [
            {
              type: "Succeeded",
              status: ending === "Succeeded" ? "True" : "False",
              reason:
                ending === "Succeeded" ? "Succeeded" : ending === "Cancelled" ? "Cancelled" : "TaskFailed",
              message: "",
              lastTransitionTime: endedAt ?? scheduledAt,
            },
          ],
        }
      : { phase: "Running", startTime: scheduledAt },
  };
}

function decideAt(now: string, partial: Partial<CronInput> = {}): CronDecision {
  return decideCron({ cron: cron(), runs: [], now: new Date(now), settings: SETTINGS, ...partial });
}

const created = (decision: CronDecision) => decision.create.map((c) => c.manifest.metadata.name);
const runName = (at: string) => scheduledRunName("nightly", new Date(at));
const condition = (decision: CronDecision, type: string) =>
  decision.status?.conditions?.find((c) => c.type === type);
/** The events a pass posts: the decision's, then RunStarted of each run it creates. */
const reasons = (decision: CronDecision) =>
  [
    ...decision.events,
    ...decision.cancel.map((c) => c.event),
    ...decision.create.map((run) => run.started),
  ].map((e) => e.reason);

interface Case {
  name: string;
  spec?: Record<string, unknown>;
  status?: CronPlaybookStatus;
  runs?: StoredPlaybook[];
  now: string;
  creates: string[];
  cancels?: string[];
  deletes?: string[];
  missed?: number;
  skipped?: number;
  lastScheduleTime?: string | undefined;
  events?: string[];
}

const cases: Case[] = [
  {
    name: "before the first scheduled time: nothing",
    now: "2026-01-01T02:59:00Z",
    creates: [],
    lastScheduleTime: undefined,
  },
  {
    name: "at the scheduled time: one run named from it",
    now: "2026-01-01T03:00:00Z",
    creates: [runName("2026-01-01T03:00:00Z")],
    lastScheduleTime: "2026-01-01T03:00:00Z",
    events: ["RunStarted"],
  },
  {
    name: "a few seconds late: still that run",
    now: "2026-01-01T03:00:07Z",
    creates: [runName("2026-01-01T03:00:00Z")],
    lastScheduleTime: "2026-01-01T03:00:00Z",
  },
  {
    name: "its run exists already (a restart): not created again",
    runs: [run("2026-01-01T03:00:00Z")],
    now: "2026-01-01T03:00:30Z",
    creates: [],
    lastScheduleTime: "2026-01-01T03:00:00Z",
  },
  {
    name: "handled already (lastScheduleTime): nothing until the next",
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    now: "2026-01-01T20:00:00Z",
    creates: [],
    lastScheduleTime: "2026-01-01T03:00:00Z",
  },
  {
    name: "downtime of three days, no deadline: the latest starts, two are missed",
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    now: "2026-01-04T10:00:00Z",
    creates: [runName("2026-01-04T03:00:00Z")],
    missed: 2,
    lastScheduleTime: "2026-01-04T03:00:00Z",
    events: ["MissedSchedule", "RunStarted"],
  },
  {
    name: "downtime, the latest within startingDeadlineSeconds: it starts",
    spec: { startingDeadlineSeconds: 600 },
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    now: "2026-01-03T03:09:00Z",
    creates: [runName("2026-01-03T03:00:00Z")],
    missed: 1,
    lastScheduleTime: "2026-01-03T03:00:00Z",
  },
  {
    name: "downtime, the latest past startingDeadlineSeconds: none starts, all are missed",
    spec: { startingDeadlineSeconds: 600 },
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    now: "2026-01-03T03:11:00Z",
    creates: [],
    missed: 2,
    lastScheduleTime: "2026-01-03T03:00:00Z",
    events: ["MissedSchedule"],
  },
  {
    name: "a minutely schedule after a day down: one starts, the count is capped and says so",
    spec: { schedule: "* * * * *" },
    status: { lastScheduleTime: "2026-01-01T00:00:00Z" },
    now: "2026-01-02T00:00:30Z",
    creates: [runName("2026-01-02T00:00:00Z")],
    missed: 999,
    lastScheduleTime: "2026-01-02T00:00:00Z",
  },
  {
    name: "Allow with a run active: another starts",
    spec: { concurrencyPolicy: "Allow" },
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    runs: [run("2026-01-01T03:00:00Z")],
    now: "2026-01-02T03:00:00Z",
    creates: [runName("2026-01-02T03:00:00Z")],
  },
  {
    name: "Forbid with a run active: the time is skipped",
    spec: { concurrencyPolicy: "Forbid" },
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    runs: [run("2026-01-01T03:00:00Z")],
    now: "2026-01-02T03:00:00Z",
    creates: [],
    skipped: 1,
    lastScheduleTime: "2026-01-02T03:00:00Z",
    events: ["RunSkipped"],
  },
  {
    name: "Forbid with the earlier run finished: it starts",
    spec: { concurrencyPolicy: "Forbid" },
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    runs: [run("2026-01-01T03:00:00Z", "Succeeded", "2026-01-01T03:10:00Z")],
    now: "2026-01-02T03:00:00Z",
    creates: [runName("2026-01-02T03:00:00Z")],
  },
  {
    name: "Replace with a run active: it is cancelled and the new one starts",
    spec: { concurrencyPolicy: "Replace" },
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    runs: [run("2026-01-01T03:00:00Z")],
    now: "2026-01-02T03:00:00Z",
    creates: [runName("2026-01-02T03:00:00Z")],
    cancels: [runName("2026-01-01T03:00:00Z")],
    events: ["RunReplaced", "RunStarted"],
  },
  {
    name: "Replace with the active run cancelled already: not cancelled twice",
    spec: { concurrencyPolicy: "Replace" },
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    runs: [run("2026-01-01T03:00:00Z", "running", undefined, true)],
    now: "2026-01-02T03:00:00Z",
    creates: [runName("2026-01-02T03:00:00Z")],
    cancels: [],
  },
  {
    name: "suspended: the time passes over, nothing is missed",
    spec: { suspend: true },
    status: { lastScheduleTime: "2026-01-01T03:00:00Z" },
    now: "2026-01-05T04:00:00Z",
    creates: [],
    missed: 0,
    lastScheduleTime: "2026-01-05T03:00:00Z",
    events: [],
  },
  {
    name: "resumed after a suspension: the next time starts, none missed",
    status: { lastScheduleTime: "2026-01-05T03:00:00Z" },
    now: "2026-01-06T03:00:01Z",
    creates: [runName("2026-01-06T03:00:00Z")],
    missed: 0,
  },
  {
    name: "history: succeeded runs past 3 and failed past 1 are deleted, oldest first",
    status: { lastScheduleTime: "2026-01-07T03:00:00Z" },
    runs: [
      run("2026-01-01T03:00:00Z", "Succeeded"),
      run("2026-01-02T03:00:00Z", "Failed"),
      run("2026-01-03T03:00:00Z", "Succeeded"),
      run("2026-01-04T03:00:00Z", "Cancelled"),
      run("2026-01-05T03:00:00Z", "Succeeded"),
      run("2026-01-06T03:00:00Z", "Succeeded"),
      run("2026-01-07T03:00:00Z"),
    ],
    now: "2026-01-07T04:00:00Z",
    creates: [],
    deletes: [runName("2026-01-01T03:00:00Z"), runName("2026-01-02T03:00:00Z")],
  },
  {
    name: "history limits of 0: every finished run goes, the active one stays",
    spec: { successfulRunsHistoryLimit: 0, failedRunsHistoryLimit: 0 },
    status: { lastScheduleTime: "2026-01-02T03:00:00Z" },
    runs: [run("2026-01-01T03:00:00Z", "Succeeded"), run("2026-01-02T03:00:00Z")],
    now: "2026-01-02T04:00:00Z",
    creates: [],
    deletes: [runName("2026-01-01T03:00:00Z")],
  },
  // Europe/Berlin springs forward at 02:00 on 2026-03-29 (to 03:00) and falls back at 03:00 on
  // 2026-10-25 (to 02:00): 02:30 does not exist on the first day and happens twice on the second.
  {
    name: "DST gap, a fixed time in it: runs once, at the end of the gap (03:00 CEST)",
    spec: { schedule: "30 2 * * *", timeZone: "Europe/Berlin" },
    status: { lastScheduleTime: "2026-03-28T01:30:00Z" },
    now: "2026-03-29T01:00:05Z",
    creates: [runName("2026-03-29T01:00:00Z")],
    lastScheduleTime: "2026-03-29T01:00:00Z",
  },
  {
    name: "DST gap, an interval schedule: its times in the gap are skipped, not missed",
    spec: { schedule: "*/30 2 * * *", timeZone: "Europe/Berlin" },
    status: { lastScheduleTime: "2026-03-28T01:30:00Z" },
    now: "2026-03-29T02:00:00Z",
    creates: [],
    missed: 0,
    lastScheduleTime: "2026-03-28T01:30:00Z",
  },
  {
    name: "DST repeat, a fixed time: runs at the first 02:30 (CEST) only",
    spec: { schedule: "30 2 * * *", timeZone: "Europe/Berlin" },
    status: { lastScheduleTime: "2026-10-25T00:30:00Z" },
    now: "2026-10-25T01:30:05Z",
    creates: [],
    lastScheduleTime: "2026-10-25T00:30:00Z",
  },
  {
    name: "DST repeat, an interval schedule: the second 02:30 (CET) runs too, under its own name",
    spec: { schedule: "*/30 2 * * *", timeZone: "Europe/Berlin" },
    status: { lastScheduleTime: "2026-10-25T01:00:00Z" },
    now: "2026-10-25T01:30:05Z",
    creates: [runName("2026-10-25T01:30:00Z")],
    lastScheduleTime: "2026-10-25T01:30:00Z",
  },
  {
    name: "a time zone moves the time: 03:00 in New York is 08:00 UTC",
    spec: { timeZone: "America/New_York" },
    now: "2026-01-01T08:00:01Z",
    creates: [runName("2026-01-01T08:00:00Z")],
  },
  {
    name: "a nickname: @hourly",
    spec: { schedule: "@hourly" },
    status: { lastScheduleTime: "2026-01-01T05:00:00Z" },
    now: "2026-01-01T06:00:00Z",
    creates: [runName("2026-01-01T06:00:00Z")],
  },
];

describe("decideCron", () => {
  it.each(cases)("$name", (c) => {
    const decision = decideAt(c.now, { cron: cron(c.spec, c.status), runs: c.runs ?? [] });
    expect(created(decision)).toEqual(c.creates);
    if (c.cancels) expect(decision.cancel.map((x) => x.name)).toEqual(c.cancels);
    expect(decision.delete).toEqual(c.deletes ?? []);
    if (c.missed !== undefined) {
      expect(decision.counts.missed).toBe(c.missed);
      expect(decision.status?.missedRuns ?? c.status?.missedRuns ?? 0).toBe(c.missed);
    }
    if (c.skipped !== undefined) expect(decision.counts.skipped).toBe(c.skipped);
    if ("lastScheduleTime" in c) {
      expect((decision.status ?? c.status)?.lastScheduleTime).toBe(c.lastScheduleTime);
    }
    if (c.events) expect(reasons(decision)).toEqual(c.events);
    expect(condition(decision, "Ready")?.status ?? "True").toBe("True");
  });

  it("labels, annotates and owns a run, and copies the template's labels, annotations and spec", () => {
    const decision = decideAt("2026-01-01T03:00:00Z", {
      cron: cron({
        template: { metadata: { labels: { team: "db" }, annotations: { note: "x" } }, spec: TEMPLATE.spec },
      }),
    });
    expect(decision.create[0]?.manifest).toEqual({
      apiVersion: "playbook.dev/v1alpha1",
      kind: "Playbook",
      metadata: {
        name: "nightly-29453940",
        namespace: "ops",
        labels: { team: "db", [LABEL_CRON_PLAYBOOK]: "nightly" },
        annotations: { note: "x", [ANNOTATION_SCHEDULED_AT]: "2026-01-01T03:00:00Z" },
        ownerReferences: [
          {
            apiVersion: "playbook.dev/v1alpha1",
            kind: "CronPlaybook",
            name: "nightly",
            uid: "cron-uid",
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      spec: TEMPLATE.spec,
    });
    expect(decision.status?.active).toEqual([{ name: "nightly-29453940" }]);
  });

  it("Replace's reason names the run that replaces the cancelled one", () => {
    const decision = decideAt("2026-01-02T03:00:00Z", {
      cron: cron({ concurrencyPolicy: "Replace" }, { lastScheduleTime: "2026-01-01T03:00:00Z" }),
      runs: [run("2026-01-01T03:00:00Z")],
    });
    expect(decision.cancel).toEqual([
      {
        name: runName("2026-01-01T03:00:00Z"),
        reason: `replaced by run ${runName("2026-01-02T03:00:00Z")} (CronPlaybook nightly, concurrencyPolicy Replace)`,
        replacedBy: runName("2026-01-02T03:00:00Z"),
        event: {
          type: "Normal",
          reason: "RunReplaced",
          message: `Cancelled run ${runName("2026-01-01T03:00:00Z")}: concurrencyPolicy Replace, run ${runName("2026-01-02T03:00:00Z")} replaces it`,
        },
      },
    ]);
    expect(decision.counts.replaced).toBe(1);
  });

  it("wakes at the next scheduled time", () => {
    const decision = decideAt("2026-01-01T02:00:00Z");
    expect(decision.requeueAfterMs).toBe(3_600_000 + 100);
  });

  it("names the missed times in its event", () => {
    const decision = decideAt("2026-01-03T03:11:00Z", {
      cron: cron(
        { startingDeadlineSeconds: 600 },
        { lastScheduleTime: "2026-01-01T03:00:00Z", missedRuns: 4 },
      ),
    });
    expect(decision.status?.missedRuns).toBe(6);
    expect(decision.events).toContainEqual({
      type: "Warning",
      reason: "MissedSchedule",
      message:
        "Missed 2 scheduled times since 2026-01-01T03:00:00Z (the latest, 2026-01-03T03:00:00Z, 11m late, past startingDeadlineSeconds 600)",
    });
  });

  it("writes nothing when nothing changed", () => {
    const first = decideAt("2026-01-01T03:00:00Z", { runs: [run("2026-01-01T03:00:00Z")] });
    const again = decideAt("2026-01-01T03:00:30Z", {
      cron: cron({}, first.status ?? undefined),
      runs: [run("2026-01-01T03:00:00Z")],
    });
    expect(again.status).toBeNull();
    expect(again.create).toEqual([]);
  });

  it("records the last success from the runs", () => {
    const decision = decideAt("2026-01-02T04:00:00Z", {
      cron: cron({}, { lastScheduleTime: "2026-01-02T03:00:00Z" }),
      runs: [
        run("2026-01-01T03:00:00Z", "Succeeded", "2026-01-01T03:20:00Z"),
        run("2026-01-02T03:00:00Z", "Failed"),
      ],
    });
    expect(decision.status?.lastSuccessfulTime).toBe("2026-01-01T03:20:00Z");
  });
});

describe("decideCron: refused specs name the field and value", () => {
  it.each([
    [
      "a schedule croner refuses",
      { schedule: "61 * * * *" },
      "InvalidSchedule",
      'spec.schedule: "61 * * * *" is not a schedule: Invalid value for minute: 61',
    ],
    [
      "six fields",
      { schedule: "0 0 3 * * *" },
      "InvalidSchedule",
      'spec.schedule: "0 0 3 * * *" is not a schedule: it has 6 fields',
    ],
    [
      "an unknown nickname",
      { schedule: "@reboot" },
      "InvalidSchedule",
      'spec.schedule: "@reboot" is not a schedule: the nicknames are',
    ],
    [
      "a date that never comes",
      { schedule: "0 0 30 2 *" },
      "InvalidSchedule",
      'spec.schedule: "0 0 30 2 *" never matches a time',
    ],
    [
      "an unknown time zone",
      { timeZone: "Mars/Olympus" },
      "InvalidTimeZone",
      'spec.timeZone: "Mars/Olympus" is not an IANA time zone',
    ],
  ])("%s", (_name, spec, reason, message) => {
    const decision = decideAt("2026-01-01T03:00:00Z", { cron: cron(spec) });
    expect(decision.create).toEqual([]);
    expect(condition(decision, "Ready")).toMatchObject({ status: "False", reason });
    expect(condition(decision, "Ready")?.message).toContain(message);
    expect(decision.events).toContainEqual(expect.objectContaining({ type: "Warning", reason }));
  });
});

describe("decideCron: the namespace policy", () => {
  const rules = clusterRules({ runnerImage: "runner:test", allowedServiceAccounts: [], allowedImages: [] });
  const refusedSpec = { template: { spec: { ...TEMPLATE.spec, serviceAccountName: "deployer" } } };

  it("refuses a template the policy does not allow: Ready False naming the field and value, and no run", () => {
    const decision = decideAt("2026-01-01T03:00:00Z", { cron: cron(refusedSpec), rules });
    expect(decision.create).toEqual([]);
    const ready = condition(decision, "Ready");
    expect(ready).toMatchObject({ status: "False", reason: "PolicyViolation" });
    expect(ready?.message).toContain("spec.template.spec.serviceAccountName");
    expect(ready?.message).toContain("deployer");
    expect(decision.events.map((e) => e.reason)).toEqual(["PolicyViolation", "RunSkipped"]);
    expect(decision.status?.lastScheduleTime).toBe("2026-01-01T03:00:00Z");
  });

  it("refuses a template whose placement the policy does not allow, naming the field and value (issue 56)", () => {
    const placed = governed({ allowedRuntimeClasses: ["gvisor"] });
    const spec = { template: { spec: { ...TEMPLATE.spec, runtimeClassName: "runc-privileged" } } };
    const decision = decideAt("2026-01-01T03:00:00Z", { cron: cron(spec), rules: placed });
    expect(decision.create).toEqual([]);
    const ready = condition(decision, "Ready");
    expect(ready).toMatchObject({ status: "False", reason: "PolicyViolation" });
    expect(ready?.message).toContain(
      'spec.template.spec.runtimeClassName: "runc-privileged" is not an allowed runtime class',
    );
  });

  it("allows a template the policy allows", () => {
    const decision = decideAt("2026-01-01T03:00:00Z", { cron: cron(), rules });
    expect(condition(decision, "Ready")).toMatchObject({ status: "True", reason: "Ready" });
    expect(created(decision)).toHaveLength(1);
  });
});

describe("decideCron: run now (trigger)", () => {
  const id = "2026-01-01T10:00:00.000Z-0a1b2c3d";
  const triggered = (spec: Record<string, unknown> = {}, status: CronPlaybookStatus = {}) =>
    cron(spec, { lastScheduleTime: "2026-01-01T03:00:00Z", ...status }, { [ANNOTATION_TRIGGER]: id });

  it("creates a manual run at once and records the trigger", () => {
    const decision = decideAt("2026-01-01T10:00:01Z", { cron: triggered() });
    expect(created(decision)).toEqual([manualRunName("nightly", id)]);
    expect(decision.create[0]?.trigger).toBe("manual");
    expect(decision.create[0]?.manifest.metadata.annotations).toMatchObject({
      [ANNOTATION_TRIGGERED_BY]: id,
      [ANNOTATION_SCHEDULED_AT]: "2026-01-01T10:00:01Z",
    });
    expect(decision.status?.lastTrigger).toEqual({
      id,
      run: manualRunName("nightly", id),
      handledAt: "2026-01-01T10:00:01Z",
    });
  });

  it("runs while suspended", () => {
    const decision = decideAt("2026-01-01T10:00:01Z", { cron: triggered({ suspend: true }) });
    expect(created(decision)).toEqual([manualRunName("nightly", id)]);
  });

  it("is skipped under Forbid while a run is active, naming it", () => {
    const decision = decideAt("2026-01-01T10:00:01Z", {
      cron: triggered({ concurrencyPolicy: "Forbid" }),
      runs: [run("2026-01-01T03:00:00Z")],
    });
    expect(decision.create).toEqual([]);
    expect(decision.status?.lastTrigger).toEqual({
      id,
      skipped: `concurrencyPolicy Forbid: run ${runName("2026-01-01T03:00:00Z")} has not finished`,
      handledAt: "2026-01-01T10:00:01Z",
    });
    expect(decision.counts.skipped).toBe(1);
  });

  it("replaces the active run under Replace", () => {
    const decision = decideAt("2026-01-01T10:00:01Z", {
      cron: triggered({ concurrencyPolicy: "Replace" }),
      runs: [run("2026-01-01T03:00:00Z")],
    });
    expect(decision.cancel.map((c) => c.name)).toEqual([runName("2026-01-01T03:00:00Z")]);
    expect(created(decision)).toEqual([manualRunName("nightly", id)]);
  });

  it("is handled once: the same id again does nothing", () => {
    const decision = decideAt("2026-01-01T10:00:05Z", {
      cron: triggered(
        {},
        { lastTrigger: { id, run: manualRunName("nightly", id), handledAt: "2026-01-01T10:00:01Z" } },
      ),
    });
    expect(decision.create).toEqual([]);
  });

  it("a manual run already created (a restart before the status write) is recorded, not created again", () => {
    const existing = {
      ...run("2026-01-01T10:00:01Z"),
      metadata: { ...run("2026-01-01T10:00:01Z").metadata, name: manualRunName("nightly", id) },
    };
    const decision = decideAt("2026-01-01T10:00:05Z", { cron: triggered(), runs: [existing] });
    expect(decision.create).toEqual([]);
    expect(decision.status?.lastTrigger?.run).toBe(manualRunName("nightly", id));
  });
});

describe("decideCron: one pass, several starts (issue 33)", () => {
  const first = "2026-01-02T02:59:58.000Z-0a1b2c3d";
  const second = "2026-01-02T02:59:59.000Z-4e5f6a7b";
  const due = "2026-01-02T03:00:00Z";
  const now = "2026-01-02T03:00:01Z";
  const requests = (...ids: string[]) =>
    Object.fromEntries(ids.map((id) => [`${ANNOTATION_TRIGGER}-${id.slice(-8)}`, id]));
  const pass = (
    policy: string,
    ids: string[],
    runs: StoredPlaybook[] = [],
    status: CronPlaybookStatus = {},
  ) =>
    decideAt(now, {
      cron: cron(
        { concurrencyPolicy: policy },
        { lastScheduleTime: "2026-01-01T03:00:00Z", ...status },
        requests(...ids),
      ),
      runs,
    });
  const answerOf = (decision: CronDecision, id: string) =>
    decision.status?.triggers?.find((t) => t.id === id);

  it("Replace with a trigger and a due time: starts one run (the scheduled one), cancels the active run only, and tells the trigger why", () => {
    // As an older CLI asks (the one annotation), the case issue 33 found.
    const decision = decideAt(now, {
      cron: cron(
        { concurrencyPolicy: "Replace" },
        { lastScheduleTime: "2026-01-01T03:00:00Z" },
        { [ANNOTATION_TRIGGER]: first },
      ),
      runs: [run("2026-01-01T03:00:00Z")],
    });
    expect(created(decision)).toEqual([runName(due)]);
    expect(decision.cancel.map((c) => c.name)).toEqual([runName("2026-01-01T03:00:00Z")]);
    expect(decision.cancel[0]?.replacedBy).toBe(runName(due));
    expect(answerOf(decision, first)).toEqual({
      id: first,
      skipped: `concurrencyPolicy Replace: run ${runName(due)}, started in the same pass, replaces it`,
      handledAt: now,
    });
    expect(decision.events).toContainEqual({
      type: "Warning",
      reason: "TriggerSkipped",
      message: `Started no run for trigger ${first}: concurrencyPolicy Replace: run ${runName(due)}, started in the same pass, replaces it`,
    });
    expect(decision.counts).toMatchObject({ skipped: 1, replaced: 1 });
  });

  it("Replace with two triggers and no due time: the later request starts, the earlier is told it was replaced", () => {
    const decision = decideAt("2026-01-01T10:00:00Z", {
      cron: cron(
        { concurrencyPolicy: "Replace" },
        { lastScheduleTime: "2026-01-01T03:00:00Z" },
        requests(first, second),
      ),
    });
    expect(created(decision)).toEqual([manualRunName("nightly", second)]);
    expect(decision.cancel).toEqual([]);
    expect(answerOf(decision, first)?.skipped).toBe(
      `concurrencyPolicy Replace: run ${manualRunName("nightly", second)}, started in the same pass, replaces it`,
    );
    expect(answerOf(decision, second)?.run).toBe(manualRunName("nightly", second));
  });

  it("Forbid with a trigger and a due time, none active: the trigger's run starts, the time is skipped naming it", () => {
    const decision = pass("Forbid", [first]);
    expect(created(decision)).toEqual([manualRunName("nightly", first)]);
    expect(answerOf(decision, first)?.run).toBe(manualRunName("nightly", first));
    expect(decision.events).toContainEqual({
      type: "Normal",
      reason: "RunSkipped",
      message: `Skipped the run scheduled at ${due}: concurrencyPolicy Forbid and run ${manualRunName("nightly", first)}, started in the same pass, has not finished`,
    });
    expect(decision.status?.lastScheduleTime).toBe(due);
  });

  it("Forbid with two triggers: the first asked for starts, the second is told why it gets none", () => {
    const decision = decideAt("2026-01-01T10:00:00Z", {
      cron: cron(
        { concurrencyPolicy: "Forbid" },
        { lastScheduleTime: "2026-01-01T03:00:00Z" },
        requests(second, first),
      ),
    });
    expect(created(decision)).toEqual([manualRunName("nightly", first)]);
    expect(answerOf(decision, second)?.skipped).toBe(
      `concurrencyPolicy Forbid: run ${manualRunName("nightly", first)}, started in the same pass, has not finished`,
    );
  });

  it("Allow with two triggers and a due time: three runs, each trigger answered with its own", () => {
    const decision = pass("Allow", [first, second]);
    expect(created(decision).sort()).toEqual(
      [manualRunName("nightly", first), manualRunName("nightly", second), runName(due)].sort(),
    );
    expect(answerOf(decision, first)?.run).toBe(manualRunName("nightly", first));
    expect(answerOf(decision, second)?.run).toBe(manualRunName("nightly", second));
    expect(decision.status?.lastTrigger?.id).toBe(second);
  });

  it("answers a request once while its annotation stays, however many answers came after", () => {
    const others = Array.from({ length: 12 }, (_, i) => ({
      id: `2026-01-01T09:00:${String(i).padStart(2, "0")}.000Z-ffffff${String(i).padStart(2, "0")}`,
      run: `nightly-now-${i}`,
      handledAt: "2026-01-01T09:01:00Z",
    }));
    const answered = { id: first, run: manualRunName("nightly", first), handledAt: "2026-01-01T08:00:00Z" };
    const decision = decideAt("2026-01-01T10:00:00Z", {
      cron: cron(
        {},
        {
          lastScheduleTime: "2026-01-01T03:00:00Z",
          triggers: [answered, ...others.slice(0, 11)],
          lastTrigger: others[10],
        },
        { ...requests(first), [`${ANNOTATION_TRIGGER}-ffffff11`]: others[11]?.id ?? "" },
      ),
    });
    expect(created(decision)).toEqual([manualRunName("nightly", others[11]?.id ?? "")]);
    // The request still annotated keeps its answer; of the others, the latest 10.
    expect(decision.status?.triggers?.map((t) => t.id)).toEqual([first, ...others.slice(1).map((t) => t.id)]);
  });
});

describe("decideCron: Stale (spec.staleAfter)", () => {
  it("is False within the bound and wakes when it passes", () => {
    const decision = decideAt("2026-01-01T02:00:00Z", { cron: cron({ staleAfter: "26h" }) });
    expect(condition(decision, "Stale")).toMatchObject({ status: "False", reason: "RecentSuccess" });
    expect(decision.requeueAfterMs).toBe(3_600_000 + 100);
  });

  it("is True when no run succeeded for longer than the bound, naming it", () => {
    const decision = decideAt("2026-01-02T03:00:00Z", {
      cron: cron({ staleAfter: "26h" }, { lastScheduleTime: "2026-01-02T03:00:00Z" }),
      runs: [run("2026-01-01T03:00:00Z", "Succeeded", "2026-01-01T00:30:00Z")],
    });
    expect(condition(decision, "Stale")).toMatchObject({
      status: "True",
      reason: "NoRecentSuccess",
      message:
        "the last successful run finished at 2026-01-01T00:30:00Z, 26h30m ago, longer than spec.staleAfter 26h",
    });
  });
});

describe("dueTimes", () => {
  it("counts the times in (after, until] and finds the latest", () => {
    const read = readSchedule("*/15 * * * *", "UTC");
    if (!read.ok) throw new Error(read.message);
    const due = dueTimes(read.schedule, new Date("2026-01-01T00:00:00Z"), new Date("2026-01-01T01:00:00Z"));
    expect(due).toEqual({ latest: new Date("2026-01-01T01:00:00Z"), count: 4, capped: false });
  });
});
