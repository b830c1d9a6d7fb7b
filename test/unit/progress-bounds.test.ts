// What a progress record may claim (src/controller/playbook/progress-bounds.ts): its start is the
// run's, its times lie in the runner's life, its seq within what the runner can have written since
// its container started, and after the record taken before by no more than the time since allows.
import { describe, expect, it } from "vitest";
import type { ProgressRecord, ProgressTask } from "../../src/api/progress-record.js";
import {
  eventRecordsOf,
  MAX_RECORDS_PER_MS,
  NODE_CLOCK_SKEW_MS,
  type RecordBounds,
  recordOutOfBounds,
} from "../../src/controller/playbook/progress-bounds.js";
import { CLOCK_SLACK_MS } from "../../src/controller/pods/report-trust.js";

const RUN_START = Date.parse("2026-01-01T00:00:00.000Z");
/** The runner container started 5 s after the run's start (the pod's scheduling, its images). */
const RUNNER_STARTED = RUN_START + 5_000;
/** The controller looks 60 s after the run's start. */
const NOW = RUN_START + 60_000;
const EVENTS = 1 + 2 * 2;

const bounds = (extra: Partial<RecordBounds> = {}): RecordBounds => ({
  runStart: new Date(RUN_START).toISOString(),
  runnerStartedAt: RUNNER_STARTED,
  now: NOW,
  eventRecords: EVENTS,
  ...extra,
});

const record = (seq: number, tasks: ProgressTask[], start = RUN_START): ProgressRecord => ({
  v: 1,
  start: new Date(start).toISOString(),
  seq,
  tasks,
});

/** The most records the runner can have written from the runner's start (less the slack) to now (plus the skew). */
const MOST =
  EVENTS + Math.ceil((NOW + NODE_CLOCK_SKEW_MS - (RUNNER_STARTED - CLOCK_SLACK_MS)) * MAX_RECORDS_PER_MS);

describe("progress record bounds", () => {
  it("counts the records the runner writes for events: the begin, and each attempt's start and end", () => {
    const limits = { tasks: [{ retries: 0 }, { retries: 2 }] } as Parameters<typeof eventRecordsOf>[0];
    expect(eventRecordsOf(limits)).toBe(1 + 2 + 6);
  });

  it("bounds the runner's rate by its log's bytes: a record costs at least 348 bytes, the log takes at most 4 GiB/s", () => {
    expect(MAX_RECORDS_PER_MS).toBe(Math.ceil((4 * 2 ** 30) / 1000 / 348) + 1);
    expect(MOST).toBeLessThan(2 ** 53 - 1);
  });

  it.each<[string, ProgressRecord, Partial<RecordBounds>]>([
    ["the runner's first record", record(0, [{ p: "Pending" }, { p: "Pending" }]), {}],
    [
      "a running task started after the runner",
      record(1, [{ p: "Running", s: 6_000 }, { p: "Pending" }]),
      {},
    ],
    [
      "a task that started within the node's slack before the runner's whole-second start",
      record(1, [{ p: "Running", s: 5_000 - CLOCK_SLACK_MS }, { p: "Pending" }]),
      {},
    ],
    [
      "finished tasks up to now, and now on a node clock ahead by the skew",
      record(3, [
        { p: "Succeeded", t: [6_000, 59_000] },
        { p: "Running", s: 60_000 + NODE_CLOCK_SKEW_MS },
      ]),
      {},
    ],
    [
      "the most records the runner can have written",
      record(MOST - 1, [{ p: "Pending" }, { p: "Pending" }]),
      {},
    ],
    [
      "a later record than the one taken before, by as many as the time since allows",
      record(10_000, [{ p: "Running", s: 6_000 }, { p: "Pending" }]),
      { last: { seq: 5, writtenAfter: RUN_START + 50_000 } },
    ],
    [
      "the record taken before, again",
      record(5, [{ p: "Running", s: 6_000 }, { p: "Pending" }]),
      { last: { seq: 5, writtenAfter: RUN_START + 6_000 } },
    ],
  ])("takes %s", (_what, taken, extra) => {
    expect(recordOutOfBounds(taken, bounds(extra))).toBeUndefined();
  });

  it.each<[string, ProgressRecord, Partial<RecordBounds>, RegExp]>([
    [
      "a seq of 2^53-1 (the forged record of issue 41)",
      record(2 ** 53 - 1, [
        { p: "Succeeded", t: [6_000, 7_000] },
        { p: "Succeeded", t: [7_000, 8_000] },
      ]),
      {},
      /^record 9007199254740991 is beyond the \d+ records the runner can have written since its container started$/,
    ],
    [
      "one record more than the runner can have written",
      record(MOST, [{ p: "Pending" }, { p: "Pending" }]),
      {},
      /is beyond the/,
    ],
    [
      "another start than the run's",
      record(1, [{ p: "Running", s: 6_000 }, { p: "Pending" }], RUN_START + 1),
      {},
      /^record 1 counts from 2026-01-01T00:00:00.001Z, not from the run's start 2026-01-01T00:00:00.000Z$/,
    ],
    [
      "a task that ran before the runner started",
      record(2, [{ p: "Succeeded", t: [1_000, 7_000] }, { p: "Pending" }]),
      {},
      /^record 2 says task 0 ran at 2026-01-01T00:00:01.000Z, outside the runner's life/,
    ],
    [
      "a running task that starts in the future",
      record(2, [{ p: "Running", s: 60_000 + NODE_CLOCK_SKEW_MS + 1 }, { p: "Pending" }]),
      {},
      /says task 0 ran at 2026-01-01T00:01:10.001Z, outside the runner's life/,
    ],
    [
      "a task that ends in the future (dates of a task's choosing)",
      record(2, [{ p: "Succeeded", t: [6_000, 86_400_000] }, { p: "Pending" }]),
      {},
      /says task 0 ran at 2026-01-02T00:00:00.000Z/,
    ],
    [
      "a record older than the one taken before",
      record(4, [{ p: "Running", s: 6_000 }, { p: "Pending" }]),
      { last: { seq: 5, writtenAfter: RUN_START + 6_000 } },
      /^record 4 is older than record 5 read before$/,
    ],
    [
      "a record more records after the one taken before than the time since allows",
      record(5 + EVENTS + Math.ceil(2_000 * MAX_RECORDS_PER_MS) + 1, [
        { p: "Running", s: 6_000 },
        { p: "Pending" },
      ]),
      // Taken before: a record written no earlier than 2 s before the latest the node's clock can say now.
      { last: { seq: 5, writtenAfter: NOW + NODE_CLOCK_SKEW_MS - 2_000 } },
      /records after record 5, more than the \d+ the runner can have written since that one$/,
    ],
  ])("refuses %s", (_what, forged, extra, why) => {
    expect(recordOutOfBounds(forged, bounds(extra))).toMatch(why);
  });
});
