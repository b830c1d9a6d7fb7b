// The controller's side of the runner's own upload, where it is pure: the plan's shape from the
// cap, which key holds segment n, when an attempt has ended as the cache shows its pod, what the
// composed upload says in LogArchived, and the pod that mounts the plan's Secret in the runner's
// container alone.
import { describe, expect, it } from "vitest";
import { resolveLimits } from "../../src/api/limits.js";
import { LOG_UPLOAD_FILE_ENV_VAR, LOG_UPLOAD_VERSION, MIN_SEGMENT_BYTES } from "../../src/api/log-upload.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { headSegmentKey, tailSlotKey } from "../../src/controller/log-archive/archive-keys.js";
import { uploadEnd, uploadVerdict } from "../../src/controller/log-archive/upload-collect.js";
import { type ComposedAttempt, segmentSource } from "../../src/controller/log-archive/upload-compose.js";
import { UPLOAD_SEGMENT_BYTES, uploadShape } from "../../src/controller/log-archive/upload-plan.js";
import type { PodView } from "../../src/controller/objects.js";
import { buildPod } from "../../src/controller/pods/pod-builder.js";
import { SETTINGS, T0 } from "./controller-fixtures.js";

const MiB = 1024 * 1024;
const KEY = "ns/run/uid/attempt-1.log";

describe("the runner's upload plan", () => {
  it("gives the default 1 GiB cap 64 head segments of 8 MiB and 66 tail slots for its last 512 MiB, and a small cap one head segment", () => {
    expect(uploadShape(1024 * MiB)).toEqual({
      head: 64,
      tail: 66,
      tailBytes: 512 * MiB - 256,
      segmentBytes: 8 * MiB,
    });
    expect(uploadShape(16 * MiB)).toEqual({
      head: 1,
      tail: 3,
      tailBytes: 8 * MiB - 256,
      segmentBytes: 8 * MiB,
    });
    expect(UPLOAD_SEGMENT_BYTES).toBeGreaterThanOrEqual(MIN_SEGMENT_BYTES);
  });

  it("finds segment n in the head, then in the tail slots in turn, and none for a slot used again since or the one filled next", () => {
    const shape = { head: 2, tail: 3, tailBytes: 16 * MiB, segmentBytes: 8 * MiB };
    // 7 segments: 0 1 in the head; 2 3 4 5 6 in slots 0 1 2 0 1, so 2 and 3 were replaced, and
    // segment 7 goes to slot 2 next (segment 4's): it may hold 7's first bytes already.
    expect([0, 1, 2, 3, 4, 5, 6].map((n) => segmentSource(KEY, shape, 7, n))).toEqual([
      headSegmentKey(KEY, 0),
      headSegmentKey(KEY, 1),
      undefined,
      undefined,
      undefined,
      tailSlotKey(KEY, 0),
      tailSlotKey(KEY, 1),
    ]);
    expect(segmentSource(KEY, { ...shape, tail: 0 }, 7, 4)).toBeUndefined();
  });
});

function pod(status: Record<string, unknown>, conditions?: unknown[]): PodView {
  return {
    metadata: { name: "run-1", namespace: "ns", uid: "p1" },
    spec: { nodeName: "node-a" },
    status: { ...status, ...(conditions ? { conditions } : {}) },
  } as unknown as PodView;
}

describe("an uploading attempt's end", () => {
  const now = Date.parse("2026-12-07T12:00:00Z");

  it("waits while the runner runs, and ends once it terminated, the pod ended, or the pod is gone", () => {
    const running = { phase: "Running", containerStatuses: [{ name: "runner", state: { running: {} } }] };
    expect(uploadEnd(pod(running), now)).toBeUndefined();
    expect(
      uploadEnd(
        pod({
          phase: "Running",
          containerStatuses: [{ name: "runner", state: { terminated: { exitCode: 0 } } }],
        }),
        now,
      ),
    ).toEqual({ how: "ended" });
    expect(uploadEnd(pod({ phase: "Failed" }), now)).toEqual({ how: "ended" });
    // A runner's own exit code, whatever its reason, is an end of its own.
    const exited = (terminated: object) =>
      uploadEnd(
        pod({ phase: "Failed", containerStatuses: [{ name: "runner", state: { terminated } }] }),
        now,
      );
    expect(exited({ exitCode: 124, reason: "Error" })).toEqual({ how: "ended" });
    expect(uploadEnd(undefined, now)).toEqual({ how: "gone" });
  });

  it("is killed when the runner did not end by itself: SIGKILL once its grace ran out, or out of memory", () => {
    const runner = (terminated: object) =>
      pod({ phase: "Failed", containerStatuses: [{ name: "runner", state: { terminated } }] });
    expect(uploadEnd(runner({ exitCode: 137, reason: "Error" }), now)).toEqual({
      how: "killed",
      by: "SIGKILL (exit code 137)",
    });
    expect(uploadEnd(runner({ exitCode: 137, reason: "OOMKilled" }), now)).toEqual({
      how: "killed",
      by: "the kernel, out of memory (OOMKilled)",
    });
  });

  it("is lost once the node's silence reached the point the controller takes the pod as lost", () => {
    const notReady = [
      { type: "Ready", status: "False", reason: "NodeNotReady", lastTransitionTime: "2026-12-07T11:58:00Z" },
    ];
    const running = {
      phase: "Running",
      containerStatuses: [{ name: "runner", ready: true, state: { running: {} } }],
    };
    expect(uploadEnd(pod(running, notReady), now)).toEqual({ how: "lost" });
    expect(uploadEnd(pod(running, notReady), Date.parse("2026-12-07T11:58:05Z"))).toBeUndefined();
  });
});

function composed(over: Partial<ComposedAttempt> & { done?: boolean; failed?: string }): ComposedAttempt {
  const { done = true, failed, ...rest } = over;
  return {
    bytes: 1000,
    sha256: "0".repeat(64),
    leftOut: 0,
    received: 1000,
    short: undefined,
    index: {
      v: LOG_UPLOAD_VERSION,
      segments: 1,
      bytes: 1000,
      lastSegmentBytes: 1000,
      done,
      ...(failed ? { failed } : {}),
    },
    ...rest,
  };
}

describe("what the composed upload says", () => {
  const args = { capBytes: 1024 * MiB, flushMs: 2000 };
  const ENDED = { how: "ended" } as const;

  it("is Archived when the runner said its last word and the store bore it out", () => {
    expect(uploadVerdict(composed({}), ENDED, args)).toEqual(["Archived", "1000 bytes archived"]);
  });

  it("names why the runner's upload stopped (StoreUnreachable), keeping what came before", () => {
    const [reason, message] = uploadVerdict(composed({ failed: "PUT segment 3: status 503" }), ENDED, args);
    expect(reason).toBe("StoreUnreachable");
    expect(message).toBe(
      "1000 bytes archived of 1000: the runner's upload stopped: PUT segment 3: status 503",
    );
  });

  it("is NodeLost with the flush bound when the pod was lost before the runner ended, StoreUnreachable when it ended and the store did not take its last word", () => {
    expect(uploadVerdict(composed({ done: false }), { how: "lost" }, args)).toEqual([
      "NodeLost",
      "1000 bytes archived: the pod was lost before its runner ended, and the archive holds what the runner had uploaded; at most the last 2 s of its output before that is missing",
    ]);
    expect(uploadVerdict(composed({ done: false }), ENDED, args)).toEqual([
      "StoreUnreachable",
      "1000 bytes archived: the store did not take the runner's last segment and index as it ended; at most the last 2 s of its output before that is missing",
    ]);
  });

  it("is Incomplete, not StoreUnreachable, when the runner was killed before its last word", () => {
    const killed = { how: "killed", by: "SIGKILL (exit code 137)" } as const;
    expect(uploadVerdict(composed({ done: false }), killed, args)).toEqual([
      "Incomplete",
      "1000 bytes archived: the runner was killed by SIGKILL (exit code 137) before it uploaded its last segment and index; at most the last 2 s of its output before that is missing",
    ]);
    expect(uploadVerdict(undefined, killed, args)).toEqual([
      "Incomplete",
      "the runner was killed by SIGKILL (exit code 137) before it uploaded any of its log: nothing is archived",
    ]);
  });

  it("is Incomplete naming the segment the store lacks, CapReached past the cap, and says when nothing was uploaded", () => {
    expect(uploadVerdict(composed({ short: "segment 1 is not in the store" }), ENDED, args)).toEqual([
      "Incomplete",
      "1000 bytes archived of 1000: segment 1 is not in the store",
    ]);
    expect(uploadVerdict(composed({ leftOut: 500, received: 1500 }), ENDED, args)[0]).toBe("CapReached");
    expect(uploadVerdict(undefined, { how: "gone" }, args)[0]).toBe("NodeLost");
    expect(uploadVerdict(undefined, ENDED, args)).toEqual([
      "Incomplete",
      "the runner uploaded none of its log: nothing is archived",
    ]);
  });
});

describe("the pod of a runner that uploads its log", () => {
  const spec = PlaybookSpecSchema.parse({
    ceiling: "10m",
    tasks: [{ name: "a", run: "true", image: "alpine:3" }],
  });
  const request = {
    playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
    spec,
    limits: resolveLimits(spec, SETTINGS.defaults),
    defaults: SETTINGS.defaults,
    attempt: 2,
    runStart: T0,
    now: T0,
    runnerImage: "runner:1",
  };
  type Container = { name: string; env?: { name: string }[]; volumeMounts?: { name: string }[] };
  type Volume = { name: string; secret?: { secretName: string } };

  it("mounts the attempt's Secret in the runner's container alone, and names its file in the runner's env", () => {
    const built = buildPod({ ...request, logUpload: true });
    const volumes = built.spec.volumes as Volume[];
    const upload = volumes.find((v) => v.secret?.secretName === "nightly-2-log-upload");
    expect(upload).toBeDefined();
    const containers = built.spec.containers as Container[];
    expect(containers.length).toBeGreaterThan(1);
    const mounting = containers.filter((c) => c.volumeMounts?.some((m) => m.name === upload?.name));
    expect(mounting.map((c) => c.name)).toEqual(["runner"]);
    const withEnv = containers.filter((c) => c.env?.some((e) => e.name === LOG_UPLOAD_FILE_ENV_VAR));
    expect(withEnv.map((c) => c.name)).toEqual(["runner"]);
  });

  it("has no Secret and no file without the upload", () => {
    const built = buildPod(request);
    expect((built.spec.volumes as Volume[]).some((v) => v.secret?.secretName?.endsWith("-log-upload"))).toBe(
      false,
    );
    expect(JSON.stringify(built.spec)).not.toContain(LOG_UPLOAD_FILE_ENV_VAR);
  });
});
