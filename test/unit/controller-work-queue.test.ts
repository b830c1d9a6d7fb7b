import { describe, expect, it } from "vitest";
import { WorkQueue } from "../../src/runtime/work-queue.js";

describe("the work queue", () => {
  it("keeps one pending entry per key however many events arrive", async () => {
    const queue = new WorkQueue();
    for (let i = 0; i < 100; i++) queue.add("ops/a");
    queue.add("ops/b");
    expect(queue.length).toBe(2);
    expect(await queue.get()).toBe("ops/a");
    expect(await queue.get()).toBe("ops/b");
  });

  it("never hands a key to two workers: an event during processing queues it once, after done", async () => {
    const queue = new WorkQueue();
    queue.add("ops/a");
    const key = await queue.get();
    queue.add("ops/a");
    queue.add("ops/a");
    expect(queue.length).toBe(0);
    queue.done(key as string);
    expect(queue.length).toBe(1);
  });

  it("wakes a waiting worker", async () => {
    const queue = new WorkQueue();
    const next = queue.get();
    queue.add("ops/a");
    expect(await next).toBe("ops/a");
  });

  it("backs off exponentially per key and forgets after success", () => {
    const queue = new WorkQueue({ baseDelayMs: 100, random: () => 0.5 });
    expect(queue.addRateLimited("ops/a")).toBe(100);
    expect(queue.addRateLimited("ops/a")).toBe(200);
    expect(queue.addRateLimited("ops/a")).toBe(400);
    expect(queue.addRateLimited("ops/b")).toBe(100);
    queue.forget("ops/a");
    expect(queue.addRateLimited("ops/a")).toBe(100);
    void queue.shutDown();
  });

  it("caps the backoff", () => {
    const queue = new WorkQueue({ baseDelayMs: 100, maxDelayMs: 1000, random: () => 0.5 });
    for (let i = 0; i < 10; i++) queue.addRateLimited("ops/a");
    expect(queue.addRateLimited("ops/a")).toBe(1000);
    void queue.shutDown();
  });

  it("delays a key and keeps only the earliest delay", async () => {
    const queue = new WorkQueue();
    queue.addAfter("ops/a", 10_000);
    queue.addAfter("ops/a", 20);
    expect(queue.length).toBe(0);
    expect(await queue.get()).toBe("ops/a");
    void queue.shutDown();
  });

  it("on shut down, gives no more work and waits for keys in flight", async () => {
    const queue = new WorkQueue();
    queue.add("ops/a");
    queue.add("ops/b");
    const key = await queue.get();
    let drained = false;
    const shutDown = queue.shutDown().then(() => {
      drained = true;
    });
    expect(await queue.get()).toBeUndefined();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(drained).toBe(false);
    queue.done(key as string);
    await shutDown;
    expect(drained).toBe(true);
  });
});
