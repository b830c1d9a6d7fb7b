// Retention's decisions (src/controller/log-archive/decide-retention.ts): the archive's finalizer
// goes on every Playbook before its first pod while the archive is on; a deleted Playbook's run
// folder is deleted before it goes; a store that stays down is retried with a growing delay and
// given up at the bound, counted from the deletionTimestamp; with the archive off, the finalizer
// lets the Playbook go at once.
import { describe, expect, it } from "vitest";
import { LOG_ARCHIVE_FINALIZER } from "../../src/api/log-archive.js";
import { afterDeleteFailed, decideRetention } from "../../src/controller/log-archive/decide-retention.js";
import { parseStoredPlaybook, type StoredPlaybook } from "../../src/controller/objects.js";

function playbook(meta: { finalizers?: string[]; deletionTimestamp?: string } = {}): StoredPlaybook {
  const parsed = parseStoredPlaybook({
    apiVersion: "playbook.dev/v1alpha1",
    kind: "Playbook",
    metadata: { name: "nightly", namespace: "team-a", uid: "u-1", resourceVersion: "7", ...meta },
    spec: { tasks: [{ name: "t", run: "true" }] },
  });
  if (!parsed) throw new Error("fixture did not parse");
  return parsed;
}

const ON = { archiveOn: true, prefix: "logs/", deleteTimeoutMs: 600_000 };
const OFF = { ...ON, archiveOn: false };
const DELETED = "2026-01-01T03:00:00Z";

describe("retention's step for a Playbook", () => {
  it.each([
    ["a new Playbook, archive on: the finalizer first", {}, ON, { type: "addFinalizer" }],
    ["a new Playbook, archive off: nothing", {}, OFF, { type: "none" }],
    [
      "one with the finalizer, archive on: nothing",
      { finalizers: [LOG_ARCHIVE_FINALIZER] },
      ON,
      { type: "none" },
    ],
    [
      "deleted with the finalizer, archive on: its run folder is deleted",
      { finalizers: ["other", LOG_ARCHIVE_FINALIZER], deletionTimestamp: DELETED },
      ON,
      { type: "deleteObjects", prefix: "logs/team-a/nightly/u-1/" },
    ],
    [
      "deleted with the finalizer, archive turned off: let go at once, naming the folder left",
      { finalizers: [LOG_ARCHIVE_FINALIZER], deletionTimestamp: DELETED },
      OFF,
      { type: "release", leftPrefix: "logs/team-a/nightly/u-1/" },
    ],
    [
      "deleted without the finalizer: nothing (the pass goes on as before)",
      { finalizers: ["other"], deletionTimestamp: DELETED },
      ON,
      { type: "none" },
    ],
  ])("%s", (_name, meta, settings, step) => {
    expect(decideRetention(playbook(meta), settings)).toEqual(step);
  });
});

describe("after a failed delete of a run's folder", () => {
  const at = (seconds: number) => new Date(Date.parse(DELETED) + seconds * 1000);

  it.each([
    ["at once: 1s", 0, { type: "retry", afterMs: 1_000 }],
    ["after 10s: half of it", 10, { type: "retry", afterMs: 5_000 }],
    ["after 5 minutes: at most a minute", 300, { type: "retry", afterMs: 60_000 }],
    ["20s before the bound: the last retry lands on it", 580, { type: "retry", afterMs: 20_000 }],
    ["at the bound: gives up", 600, { type: "giveUp", waitedMs: 600_000 }],
    ["past the bound (a controller that was down): gives up", 3600, { type: "giveUp", waitedMs: 3_600_000 }],
  ])("%s", (_name, seconds, step) => {
    expect(afterDeleteFailed(DELETED, at(seconds), 600_000)).toEqual(step);
  });

  it("retries with a delay that grows, so a store down for the whole bound is asked a bounded number of times", () => {
    let now = 0;
    let tries = 0;
    for (;;) {
      tries++;
      const step = afterDeleteFailed(DELETED, at(now), 600_000);
      if (step.type === "giveUp") break;
      now += step.afterMs / 1000;
    }
    expect(now).toBe(600);
    expect(tries).toBeLessThan(30);
  });
});
