// Where the runner's log upload puts each segment (src/pod-runner/log-upload.ts): the head's
// segments in order, later ones in the tail's slots in turn, nothing past the head with no tail;
// and the give-up reason cut to what the index's schema takes.
import { describe, expect, it } from "vitest";
import { LogUploadIndexSchema } from "../../src/api/log-upload.js";
import { failedReason, segmentName, segmentSlot, segmentUrl } from "../../src/pod-runner/log-upload.js";

const plan = {
  head: ["http://s/h-0", "http://s/h-1"],
  tail: ["http://s/t-0", "http://s/t-1", "http://s/t-2"],
};

describe("segment slots", () => {
  it.each([
    { name: "the first segment goes to the head's first URL", n: 0, slot: { part: "head", slot: 0 } },
    { name: "the head's last segment", n: 1, slot: { part: "head", slot: 1 } },
    {
      name: "the first segment past the head takes the tail's first slot",
      n: 2,
      slot: { part: "tail", slot: 0 },
    },
    { name: "the tail's last slot", n: 4, slot: { part: "tail", slot: 2 } },
    { name: "the tail wraps to its first slot", n: 5, slot: { part: "tail", slot: 0 } },
    { name: "and on", n: 2 + 3 * 1000 + 1, slot: { part: "tail", slot: 1 } },
  ])("$name", ({ n, slot }) => {
    expect(segmentSlot(n, plan.head.length, plan.tail.length)).toEqual(slot);
  });

  it("keeps nothing past the head when the tail is empty", () => {
    expect(segmentSlot(1, 2, 0)).toEqual({ part: "head", slot: 1 });
    expect(segmentSlot(2, 2, 0)).toBeUndefined();
    expect(segmentUrl({ head: plan.head, tail: [] }, 2)).toBeUndefined();
  });

  it("gives each segment its URL: head, then the tail's slots in turn", () => {
    expect([0, 1, 2, 3, 4, 5, 6].map((n) => segmentUrl(plan, n))).toEqual([
      "http://s/h-0",
      "http://s/h-1",
      "http://s/t-0",
      "http://s/t-1",
      "http://s/t-2",
      "http://s/t-0",
      "http://s/t-1",
    ]);
  });

  it("names a tail segment with its slot", () => {
    expect(segmentName(plan, 1)).toBe("segment 1");
    expect(segmentName(plan, 6)).toBe("segment 6 (tail slot 1)");
  });
});

describe("the give-up reason", () => {
  it("is kept whole when short and cut to the index's 500 characters when not", () => {
    expect(failedReason("the store refused the PUT of segment 0: 403")).toBe(
      "the store refused the PUT of segment 0: 403",
    );
    const long = failedReason(`the store refused: ${"x".repeat(2000)}`);
    expect(long).toHaveLength(500);
    const index = { v: 1, segments: 0, bytes: 0, lastSegmentBytes: 0, done: false, failed: long };
    expect(LogUploadIndexSchema.safeParse(index).success).toBe(true);
  });
});
