// The writer's memory of what it just wrote (src/controller/playbook/expectations.ts): a created pod
// is trusted until the cache shows it or 30 s pass, the oldest going first, and a pod created again
// under the same name counts from its new create.
import { afterEach, describe, expect, it, vi } from "vitest";
import type { PodView } from "../../src/controller/objects.js";
import { WriteExpectations } from "../../src/controller/playbook/expectations.js";

const podNamed = (name: string): PodView => ({ metadata: { name, namespace: "ops", uid: `uid-${name}` } });

afterEach(() => {
  vi.restoreAllMocks();
});

describe("the writer's expectations", () => {
  it("forget a created pod after 30 s, the oldest first, and count a re-created one from its new create", () => {
    let now = 0;
    vi.spyOn(performance, "now").mockImplementation(() => now);
    const expectations = new WriteExpectations();
    expectations.createdNow(podNamed("a-1"), "pb-a");
    now = 10_000;
    expectations.createdNow(podNamed("b-1"), "pb-b");
    now = 20_000;
    // Created again (another attempt under the same name): its memory counts from now.
    expectations.createdNow(podNamed("a-1"), "pb-a");
    now = 35_000;
    expectations.createdNow(podNamed("c-1"), "pb-c");
    expect(expectations.createdPod("ops", "a-1", "pb-a")).toBeDefined();
    expect(expectations.createdPod("ops", "b-1", "pb-b")).toBeDefined();
    now = 45_000;
    expectations.createdNow(podNamed("d-1"), "pb-d");
    expect(expectations.createdPods("ops").map((p) => p.metadata.name)).toEqual(["a-1", "c-1", "d-1"]);
    expect(expectations.createdPod("ops", "b-1", "pb-b")).toBeUndefined();
  });

  it("give a run its own created pods, and forget them as the cache shows them or they expire", () => {
    let now = 0;
    vi.spyOn(performance, "now").mockImplementation(() => now);
    const expectations = new WriteExpectations();
    expectations.createdNow(podNamed("a-1"), "pb-a");
    expectations.createdNow(podNamed("b-1"), "pb-b");
    expectations.createdNow(podNamed("a-2"), "pb-a");
    expect(expectations.createdPodsOf("pb-a").map((p) => p.metadata.name)).toEqual(["a-1", "a-2"]);
    expect(expectations.createdPodsOf("pb-c")).toEqual([]);
    expectations.sawPod(podNamed("a-1"));
    expect(expectations.createdPodsOf("pb-a").map((p) => p.metadata.name)).toEqual(["a-2"]);
    // The same name created again for another run (a Playbook deleted and made anew) is that run's.
    expectations.createdNow(podNamed("a-2"), "pb-a2");
    expect(expectations.createdPodsOf("pb-a")).toEqual([]);
    expect(expectations.createdPodsOf("pb-a2").map((p) => p.metadata.name)).toEqual(["a-2"]);
    now = 30_000;
    expect(expectations.createdPodsOf("pb-b")).toEqual([]);
    expectations.createdNow(podNamed("c-1"), "pb-c");
    expect(expectations.createdPodsOf("pb-c").map((p) => p.metadata.name)).toEqual(["c-1"]);
    expect(expectations.createdPods("ops").map((p) => p.metadata.name)).toEqual(["c-1"]);
  });

  it("keep a first pod's start record for 10 minutes", () => {
    let now = 0;
    vi.spyOn(performance, "now").mockImplementation(() => now);
    const expectations = new WriteExpectations();
    const record = {
      startTime: "2026-12-04T00:00:00Z",
      podName: "a-1",
      podUID: "u",
      podAttempts: 1,
      planDigest: "d",
    };
    expectations.createdUnrecorded("pb-a", record);
    now = 5 * 60_000;
    expectations.createdUnrecorded("pb-b", { ...record, podName: "b-1" });
    now = 10 * 60_000 + 1;
    expectations.createdUnrecorded("pb-c", { ...record, podName: "c-1" });
    expect(expectations.unrecordedStart("pb-a")).toBeUndefined();
    expect(expectations.unrecordedStart("pb-b")?.podName).toBe("b-1");
    expect(expectations.unrecordedStart("pb-c")?.podName).toBe("c-1");
  });
});
