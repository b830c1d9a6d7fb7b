// The log archive's pure parts: the cap's arithmetic (head, tail, the segments that fall out of
// the window), what the status says of an attempt's archive, and which attempt a pass follows.
import { describe, expect, it } from "vitest";
import { LOG_ARCHIVED } from "../../src/api/log-archive.js";
import type { PlaybookStatus } from "../../src/api/playbook.js";
import { clusterRules, PolicySpecSchema } from "../../src/api/policy.js";
import {
  capPlan,
  LEFT_OUT_LINE_RESERVE,
  leftOutLine,
  PART_BYTES,
  segmentsOutOfWindow,
  tailSkip,
} from "../../src/controller/log-archive/archive-cap.js";
import { archivedLogCap, attemptToFollow } from "../../src/controller/log-archive/archive-pass.js";
import {
  archiveStatus,
  archivingMessage,
  wasArchiving,
} from "../../src/controller/log-archive/archive-status.js";
import type { PodView, StoredPlaybook } from "../../src/controller/objects.js";

const MiB = 1024 * 1024;
const now = new Date("2026-12-07T06:00:00Z");
const log = { bucket: "logs", key: "ns/run/u1/attempt-1.log", bytes: 10, sha256: "a".repeat(64) };

describe("the cap", () => {
  it.each([
    ["1Gi keeps 512Mi of head in whole parts", 1024 * MiB, 512 * MiB],
    ["16Mi keeps one part of head", 16 * MiB, 8 * MiB],
    ["20Mi keeps one part of head", 20 * MiB, 8 * MiB],
    ["a cap under two parts still keeps one", 9 * MiB, 8 * MiB],
  ])("%s", (_name, cap, head) => {
    const plan = capPlan(cap);
    expect(plan.headBytes).toBe(head);
    expect(plan.headBytes + plan.tailBytes + LEFT_OUT_LINE_RESERVE).toBe(
      Math.max(cap, head + LEFT_OUT_LINE_RESERVE),
    );
  });

  it("says how many bytes were left out, on a line of its own that fits its reserve", () => {
    const line = leftOutLine(123456789012, capPlan(1024 * MiB));
    expect(line).toMatch(/^\n\[playbook-controller: 123456789012 bytes of output left out here;/);
    expect(line.endsWith("]\n")).toBe(true);
    expect(Buffer.byteLength(line)).toBeLessThanOrEqual(LEFT_OUT_LINE_RESERVE);
  });

  it.each([
    ["none while the newer bytes do not reach the tail", [8, 8], 0, 16, 0],
    ["the oldest once the newer ones alone hold the tail", [8, 8, 8], 0, 16, 1],
    ["the bytes in memory count as newer", [8, 8], 4, 10, 1],
    ["every segment when the memory holds the tail", [8, 8], 20, 16, 2],
  ])("drops %s", (_name, segments, pending, tail, dropped) => {
    expect(segmentsOutOfWindow(segments, pending, tail)).toBe(dropped);
  });

  it("starts the tail where the last tailBytes begin", () => {
    expect(tailSkip(30, 16)).toBe(14);
    expect(tailSkip(10, 16)).toBe(0);
  });

  it("refuses a policy's archivedLogBytes under 16Mi, naming the field", () => {
    const under = PolicySpecSchema.safeParse({ maximums: { archivedLogBytes: "8Mi" } });
    expect(under.success).toBe(false);
    expect(under.error?.issues[0]?.message).toMatch(/at least 16Mi \(spec\.maximums\.archivedLogBytes\)/);
    expect(PolicySpecSchema.safeParse({ maximums: { archivedLogBytes: "16Mi" } }).success).toBe(true);
  });

  it("takes maximums.archivedLogBytes from the policy, else 1Gi", () => {
    const rules = clusterRules({ runnerImage: "r", allowedServiceAccounts: [], allowedImages: [] });
    expect(archivedLogCap(rules)).toBe(1024 ** 3);
    expect(archivedLogCap({ ...rules, maximums: { archivedLogBytes: "16Mi" } })).toBe(16 * MiB);
    expect(PART_BYTES).toBe(8 * MiB);
  });
});

describe("what the status says of the archive", () => {
  const running: PlaybookStatus = { phase: "Running", podName: "run-1", podUID: "p1", podAttempts: 1 };

  it("says Unknown Archiving while the attempt runs, naming the attempt", () => {
    const next = archiveStatus(
      running,
      { podUID: "p1", attempt: 1, state: "archiving", key: log.key },
      now,
      3,
    );
    const condition = next?.conditions?.find((c) => c.type === LOG_ARCHIVED);
    expect(condition).toMatchObject({ status: "Unknown", reason: "Archiving", observedGeneration: 3 });
    expect(next?.log).toBeUndefined();
    expect(next && wasArchiving(next, 1)).toBe(true);
    expect(next && wasArchiving(next, 2)).toBe(false);
  });

  it("writes status.log and True Archived once the object is whole, and nothing when it says so already", () => {
    const ended = {
      podUID: "p1",
      attempt: 1,
      state: "ended",
      reason: "Archived",
      message: "10 bytes archived",
      log,
    } as const;
    const next = archiveStatus(running, ended, now, 3);
    expect(next?.log).toEqual(log);
    expect(next?.conditions?.find((c) => c.type === LOG_ARCHIVED)).toMatchObject({
      status: "True",
      reason: "Archived",
    });
    expect(next && archiveStatus(next, ended, now, 3)).toBeNull();
  });

  it.each(["StoreUnreachable", "CapReached", "NodeLost", "Incomplete"] as const)(
    "says False %s with the message",
    (reason) => {
      const next = archiveStatus(
        { ...running, log },
        { podUID: "p1", attempt: 1, state: "ended", reason, message: "why" },
        now,
        undefined,
      );
      expect(next?.conditions?.find((c) => c.type === LOG_ARCHIVED)).toMatchObject({
        status: "False",
        reason,
        message: "attempt 1: why",
      });
      expect(next?.log).toBeUndefined();
    },
  );

  it("says nothing of an attempt the status does not record", () => {
    expect(
      archiveStatus(running, { podUID: "p0", attempt: 1, state: "archiving", key: "k" }, now, 1),
    ).toBeNull();
    expect(archiveStatus(running, undefined, now, 1)).toBeNull();
  });
});

describe("which attempt a pass follows", () => {
  const playbook = (status: PlaybookStatus): StoredPlaybook =>
    ({
      metadata: { namespace: "ns", name: "run", uid: "u1" },
      spec: {},
      status,
    }) as unknown as StoredPlaybook;
  const pod = (state: object): PodView =>
    ({
      metadata: { name: "run-1", namespace: "ns", uid: "p1" },
      status: { containerStatuses: [{ name: "runner", state }] },
    }) as unknown as PodView;
  const recorded: PlaybookStatus = { phase: "Running", podName: "run-1", podUID: "p1", podAttempts: 1 };

  it("follows the recorded pod once its runner started, with the run's identity", () => {
    expect(attemptToFollow(playbook(recorded), [pod({ waiting: {} })], 1)).toBeUndefined();
    expect(attemptToFollow(playbook(recorded), [pod({ running: {} })], 1)).toEqual({
      run: { namespace: "ns", name: "run", uid: "u1" },
      attempt: 1,
      pod: "run-1",
      podUID: "p1",
      capBytes: 1,
      resumed: false,
    });
  });

  it("marks an attempt an earlier controller was archiving as resumed, even without its pod", () => {
    const status = {
      ...recorded,
      conditions: [
        {
          type: LOG_ARCHIVED,
          status: "Unknown" as const,
          reason: "Archiving",
          message: archivingMessage(1, "k"),
          lastTransitionTime: now.toISOString(),
        },
      ],
    };
    expect(attemptToFollow(playbook(status), [pod({ running: {} })], 1)?.resumed).toBe(true);
    expect(attemptToFollow(playbook(status), [], 1)?.resumed).toBe(true);
  });

  it("begins nothing for a Playbook being deleted: its folder is being emptied", () => {
    const deleted = playbook(recorded);
    deleted.metadata.deletionTimestamp = now.toISOString();
    expect(attemptToFollow(deleted, [pod({ running: {} })], 1)).toBeUndefined();
  });

  it("leaves an attempt whose archive the status has settled", () => {
    const status = {
      ...recorded,
      conditions: [
        {
          type: LOG_ARCHIVED,
          status: "True" as const,
          reason: "Archived",
          message: "attempt 1: 10 bytes archived",
          lastTransitionTime: now.toISOString(),
        },
      ],
    };
    expect(attemptToFollow(playbook(status), [pod({ terminated: { exitCode: 0 } })], 1)).toBeUndefined();
  });
});
