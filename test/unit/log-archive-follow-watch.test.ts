// When the controller ends an attempt's log follow by itself (follow-watch.ts): a pod taken as
// lost with its silent node, a pod gone or deleted while its stream idles, a stream that ended
// cleanly while the runner still runs (a kubelet that died), and when opening is tried again.
// The real node, silent with the stream open, is test/real-node/log-archive-node-lost.test.ts.
import { describe, expect, it } from "vitest";
import { LOG_ARCHIVE_REASONS, LOG_ARCHIVED } from "../../src/api/log-archive.js";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { archiveStatus, archivingMessage } from "../../src/controller/log-archive/archive-status.js";
import {
  CLEAN_END_SETTLE_MS,
  cleanEnd,
  followCut,
  GONE_STREAM_MS,
  notWholeMessage,
  OPEN_RETRY_MS,
  openRetryDelay,
  SILENT_STREAM_MS,
} from "../../src/controller/log-archive/follow-watch.js";
import type { PodView } from "../../src/controller/objects.js";
import { NODE_SILENCE_MS } from "../../src/controller/pods/node-lost.js";

const T0 = Date.parse("2026-12-07T03:12:00.000Z");
const at = (seconds: number) => T0 + seconds * 1000;
const iso = (seconds: number) => new Date(at(seconds)).toISOString();

/** The run's pod on node-a: its runner running, or ended; `markedAt`: when the node controller marked it not Ready. */
function pod(
  options: { markedAt?: number; runner?: "running" | "terminated"; deletedAt?: number } = {},
): PodView {
  const runner = options.runner ?? "running";
  return {
    metadata: {
      name: "run-1",
      namespace: "ns",
      uid: "u1",
      ...(options.deletedAt === undefined ? {} : { deletionTimestamp: iso(options.deletedAt) }),
    },
    spec: { nodeName: "node-a" },
    status: {
      phase: "Running",
      conditions: [
        {
          type: "Ready",
          status: options.markedAt === undefined ? "True" : "False",
          lastTransitionTime: iso(options.markedAt ?? 1),
        },
      ],
      containerStatuses: [
        {
          name: "runner",
          ready: runner === "running",
          state:
            runner === "running"
              ? { running: { startedAt: iso(1) } }
              : { terminated: { exitCode: 0, finishedAt: iso(5) } },
        } as NonNullable<NonNullable<PodView["status"]>["containerStatuses"]>[number],
      ],
    },
  };
}

describe("a follow the controller ends by itself", () => {
  const lostAt = 40 + NODE_SILENCE_MS / 1000;
  it.each([
    [
      "a healthy pod whose stream idles for long",
      pod(),
      { openedAt: at(0), lastByteAt: at(1) },
      at(600),
      false,
    ],
    [
      "a silent node not yet taken as lost",
      pod({ markedAt: 40 }),
      { openedAt: at(0), lastByteAt: at(10) },
      at(lostAt) - 1,
      false,
    ],
    [
      "a silent node taken as lost, its stream idle",
      pod({ markedAt: 40 }),
      { openedAt: at(0), lastByteAt: at(10) },
      at(lostAt),
      true,
    ],
    [
      "a node marked silent whose stream still brings bytes",
      pod({ markedAt: 40 }),
      { openedAt: at(0), lastByteAt: at(lostAt) - SILENT_STREAM_MS + 1 },
      at(lostAt),
      false,
    ],
    ["a silent node before any byte arrived", pod({ markedAt: 40 }), { openedAt: at(0) }, at(lostAt), true],
    [
      "a pod gone, its stream idle for the bound",
      undefined,
      { openedAt: at(0), lastByteAt: at(10) },
      at(10) + GONE_STREAM_MS,
      true,
    ],
    [
      "a pod gone, its stream idle for less",
      undefined,
      { openedAt: at(0), lastByteAt: at(10) },
      at(10) + GONE_STREAM_MS - 1,
      false,
    ],
    [
      "a pod deleted, its grace not over",
      pod({ deletedAt: 100 }),
      { openedAt: at(0), lastByteAt: at(10) },
      at(99),
      false,
    ],
    [
      "a pod deleted, its grace over, its stream idle",
      pod({ deletedAt: 100 }),
      { openedAt: at(0), lastByteAt: at(10) },
      at(100),
      true,
    ],
  ])("%s: ended %s", (_case, observed, times, now, ended) => {
    expect(followCut(observed, times, now) !== undefined).toBe(ended);
  });

  it("names the node's silence and when the stream last spoke", () => {
    const cut = followCut(pod({ markedAt: 40 }), { openedAt: at(0), lastByteAt: at(9) }, at(lostAt));
    expect(cut).toEqual({
      silence: { node: "node-a", since: at(40), lostAt: at(lostAt) },
      why: `its log said nothing since ${iso(9)}`,
    });
  });
});

describe("a stream that ended without an error", () => {
  it.each([
    ["the runner ended", pod({ runner: "terminated" }), at(0), "whole"],
    ["the pod is gone", undefined, at(0), "whole"],
    ["the runner still runs, within the settle", pod(), at(CLEAN_END_SETTLE_MS / 1000) - 1, "wait"],
  ])("%s: %s", (_case, observed, now, expected) => {
    expect(cleanEnd(observed, at(0), now)).toBe(expected);
  });

  it("is cut, not whole, when the runner still runs past the settle (its kubelet died)", () => {
    expect(cleanEnd(pod(), at(0), at(CLEAN_END_SETTLE_MS / 1000))).toEqual({
      why: `the log stream ended at ${iso(0)} while the runner container still ran (its kubelet stopped?)`,
    });
  });
});

describe("opening the follow again", () => {
  it.each([
    ["a transient failure, first try", { notFound: false, tries: 1 }, pod(), at(0), 500],
    ["a transient failure, fourth try", { notFound: false, tries: 4 }, pod(), at(10), 4000],
    ["backs off to 8 s at most", { notFound: false, tries: 9 }, pod(), at(10), 8000],
    ["a 404: the pod is gone", { notFound: true, tries: 1 }, pod(), at(0), undefined],
    ["the pod is gone from the cache", { notFound: false, tries: 1 }, undefined, at(0), undefined],
    [
      "its node taken as lost",
      { notFound: false, tries: 1 },
      pod({ markedAt: 0 }),
      at(NODE_SILENCE_MS / 1000),
      undefined,
    ],
    ["past the bound", { notFound: false, tries: 2 }, pod(), at(OPEN_RETRY_MS / 1000) - 500, undefined],
  ])("%s: %s ms", (_case, failure, observed, now, delay) => {
    expect(openRetryDelay(failure, observed, at(0), now)).toBe(delay);
  });
});

describe("what an archive that is not whole says it misses", () => {
  it("the bytes, the last arrival, the node's mark and the gap between them", () => {
    expect(
      notWholeMessage({
        bytes: 1234,
        lastByteAt: at(9),
        silence: { node: "node-a", since: at(40), lostAt: at(70) },
        why: `its log said nothing since ${iso(9)}`,
      }),
    ).toBe(
      `1234 bytes archived, the last at ${iso(9)}; the pod's node node-a stopped reporting (marked not Ready at ${iso(40)}; its log said nothing since ${iso(9)}): what the task printed after ${iso(9)}, at most 31 s of it before the node was marked, is not in it, nor what the pod printed on the silent node`,
    );
  });

  it("nothing arrived: says so without a time", () => {
    expect(notWholeMessage({ bytes: 0, why: "the pod was gone" })).toBe(
      "0 bytes archived; the pod was gone: what the task printed is not in it",
    );
  });
});

describe("what the status says of an earlier attempt lost with its node", () => {
  const lost = {
    podUID: "p1",
    attempt: 1,
    state: "ended" as const,
    reason: LOG_ARCHIVE_REASONS.nodeLost,
    message: "2495 bytes archived, the last at ...",
    log: { bucket: "b", key: "ns/run/u/attempt-1.log", bytes: 2495, sha256: "a".repeat(64) },
  };
  const archiving = (attempt: number) => ({
    type: LOG_ARCHIVED,
    status: "Unknown" as const,
    reason: LOG_ARCHIVE_REASONS.archiving,
    message: archivingMessage(attempt, `ns/run/u/attempt-${attempt}.log`),
    lastTransitionTime: iso(0),
  });
  // The run moved on to attempt 2 (its pod not started yet) while attempt 1's follow was open.
  const movedOn: PlaybookStatus = {
    phase: "Pending",
    podName: "run-2",
    podUID: "p2",
    podAttempts: 2,
    conditions: [archiving(1)],
  };

  it("says how attempt 1's archive ended, without its status.log, while the status still says it is being archived", () => {
    const next = archiveStatus(movedOn, lost, new Date(at(80)), 1);
    expect(next?.conditions?.find((c) => c.type === LOG_ARCHIVED)).toMatchObject({
      status: "False",
      reason: "NodeLost",
      message: `attempt 1: ${lost.message}`,
    });
    expect(next?.log).toBeUndefined();
    expect(next && archiveStatus(next, lost, new Date(at(81)), 1)).toBeNull();
  });

  it("says nothing of it once attempt 2's archive began, nor while attempt 1's follow is open", () => {
    expect(archiveStatus({ ...movedOn, conditions: [archiving(2)] }, lost, new Date(at(80)), 1)).toBeNull();
    expect(
      archiveStatus(movedOn, { podUID: "p1", attempt: 1, state: "archiving", key: "k" }, new Date(at(80)), 1),
    ).toBeNull();
  });
});
