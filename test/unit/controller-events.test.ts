// The event recorder: repeats of an event update one Event (count, lastTimestamp) instead of
// making more, and a slow API server makes it drop (counted, logged), not pile events up.
import type { CoreV1Event } from "@kubernetes/client-node";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { ApiError } from "../../src/runtime/api-client.js";
import {
  type EventApi,
  EventRecorder,
  type EventTarget,
  type RecordedEvent,
} from "../../src/runtime/events.js";
import { at } from "./controller-fixtures.js";

type Call =
  | { op: "create"; name: string; count: number | undefined; first: unknown; last: unknown; reason?: string }
  | { op: "patch"; name: string; count: number | undefined; last: unknown };

/** An API that records the calls; `hold()` makes calls wait until `release()`. */
function recordingApi() {
  const calls: Call[] = [];
  let gate: Promise<void> | undefined;
  let open: () => void = () => {};
  const expired = new Set<string>();
  const wait = () => gate ?? Promise.resolve();
  const api: EventApi = {
    async createNamespacedEvent({ body }: { namespace: string; body: CoreV1Event }) {
      await wait();
      calls.push({
        op: "create",
        name: body.metadata?.name ?? "",
        count: body.count,
        first: body.firstTimestamp,
        last: body.lastTimestamp,
        ...(body.reason ? { reason: body.reason } : {}),
      });
      return body;
    },
    async patchNamespacedEvent({
      name,
      body,
    }: {
      namespace: string;
      name: string;
      body: Partial<CoreV1Event>;
    }) {
      await wait();
      if (expired.has(name)) throw new ApiError(404, {}, `events "${name}" not found`);
      calls.push({ op: "patch", name, count: body.count, last: body.lastTimestamp });
      return body;
    },
  };
  return {
    api,
    calls,
    expire: (name: string) => expired.add(name),
    hold() {
      gate = new Promise((resolve) => {
        open = resolve;
      });
    },
    release() {
      gate = undefined;
      open();
    },
  };
}

/** A logger whose lines are kept. */
function keptLog() {
  const lines: { msg: string; [key: string]: unknown }[] = [];
  const log = pino({ level: "debug" }, { write: (line: string) => lines.push(JSON.parse(line)) });
  return { log, lines };
}

const target: EventTarget = { namespace: "ops", name: "nightly", uid: "uid-1", resourceVersion: "10" };
const pending: RecordedEvent = { type: "Normal", reason: "Pending", message: "pod nightly-1 is pending" };

describe("an event repeated by later passes", () => {
  it("updates the count and lastTimestamp of the one Event it made", async () => {
    const { api, calls } = recordingApi();
    const recorder = new EventRecorder(api, "test", keptLog().log);
    for (const [i, second] of [1, 5, 9].entries()) {
      // Each pass sees a newer resourceVersion of the same object.
      recorder.post({ ...target, resourceVersion: String(10 + i) }, pending, at(second));
      await recorder.flush();
    }
    const [created, ...patched] = calls;
    expect(created).toMatchObject({ op: "create", count: 1, first: at(1), last: at(1) });
    expect(patched).toEqual([
      { op: "patch", name: created?.name, count: 2, last: at(5) },
      { op: "patch", name: created?.name, count: 3, last: at(9) },
    ]);
  });

  it.each([
    { name: "a different message", other: { ...pending, message: "pod nightly-2 is pending" }, of: target },
    { name: "a different reason", other: { ...pending, reason: "Running" }, of: target },
    { name: "another object", other: pending, of: { ...target, name: "weekly", uid: "uid-2" } },
  ])("is a new Event when it has $name", async ({ other, of }) => {
    const { api, calls } = recordingApi();
    const recorder = new EventRecorder(api, "test", keptLog().log);
    recorder.post(target, pending, at(1));
    recorder.post(of, other, at(2));
    await recorder.flush();
    expect(calls.map((c) => [c.op, c.count])).toEqual([
      ["create", 1],
      ["create", 1],
    ]);
  });

  it("is merged into the same event while that one still waits to be written", async () => {
    const { api, calls, hold, release } = recordingApi();
    const recorder = new EventRecorder(api, "test", keptLog().log);
    hold();
    recorder.post(target, { ...pending, reason: "First" }, at(0));
    for (let second = 1; second <= 5; second++) recorder.post(target, pending, at(second));
    expect(recorder.queuedCount).toBe(1);
    release();
    await recorder.flush();
    expect(calls).toEqual([
      expect.objectContaining({ op: "create", reason: "First", count: 1 }),
      expect.objectContaining({ op: "create", reason: "Pending", count: 5, first: at(1), last: at(5) }),
    ]);
  });

  it("starts a new Event once the API server let the old one expire", async () => {
    const { api, calls, expire } = recordingApi();
    const recorder = new EventRecorder(api, "test", keptLog().log);
    recorder.post(target, pending, at(1));
    await recorder.flush();
    expire(calls[0]?.name ?? "");
    recorder.post(target, pending, at(2));
    await recorder.flush();
    expect(calls.map((c) => [c.op, c.count])).toEqual([
      ["create", 1],
      ["create", 1],
    ]);
    expect(calls[1]?.name).not.toBe(calls[0]?.name);
  });

  it("is forgotten least recently written first, past maxRemembered", async () => {
    const { api, calls } = recordingApi();
    const recorder = new EventRecorder(api, "test", keptLog().log, { maxRemembered: 2 });
    const said = (message: string) => ({ ...pending, message });
    for (const message of ["a", "b", "a", "c", "a", "b"]) {
      recorder.post(target, said(message), at(1));
      await recorder.flush();
    }
    // a is written again before c pushes out the least recent (b); b then starts a new Event.
    expect(calls.map((c) => [c.op, c.count])).toEqual([
      ["create", 1],
      ["create", 1],
      ["patch", 2],
      ["create", 1],
      ["patch", 3],
      ["create", 1],
    ]);
  });
});

describe("a slow API server", () => {
  it("makes the recorder drop events past maxQueued, counted and logged once, not queue them all", async () => {
    const { api, calls, hold, release } = recordingApi();
    const { log, lines } = keptLog();
    let droppedCalls = 0;
    const recorder = new EventRecorder(api, "test", log, {
      maxQueued: 3,
      onDropped: () => droppedCalls++,
    });
    hold();
    // The first is taken to be written (and waits on the API server); three wait in the queue.
    for (let i = 0; i < 10; i++) recorder.post(target, { ...pending, message: `event ${i}` }, at(i));
    expect(recorder.queuedCount).toBe(3);
    expect(recorder.dropped).toBe(6);
    expect(droppedCalls).toBe(6);
    const warnings = lines.filter((l) => l.msg.startsWith("Dropped events"));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: 40, namespace: "ops", name: "nightly", queued: 3 });
    release();
    await recorder.flush();
    expect(calls.map((c) => (c.op === "create" ? c.name : ""))).toHaveLength(4);
    expect(recorder.queuedCount).toBe(0);
  });

  it("writes nothing more once this replica stopped leading", async () => {
    const { api, calls, hold, release } = recordingApi();
    const leading = new AbortController();
    const recorder = new EventRecorder(api, "test", keptLog().log, { signal: leading.signal });
    hold();
    recorder.post(target, { ...pending, message: "in flight" }, at(0));
    recorder.post(target, { ...pending, message: "queued" }, at(1));
    leading.abort();
    recorder.post(target, { ...pending, message: "after" }, at(2));
    release();
    await recorder.flush();
    expect(calls.map((c) => c.op)).toEqual(["create"]);
  });
});

describe("an event's message", () => {
  it("shows the control characters of what it quotes (a kubelet's words, a task's line) as escapes", async () => {
    const messages: (string | undefined)[] = [];
    const api: EventApi = {
      async createNamespacedEvent({ body }: { namespace: string; body: CoreV1Event }) {
        messages.push(body.message);
        return body;
      },
      async patchNamespacedEvent({ body }: { namespace: string; name: string; body: Partial<CoreV1Event> }) {
        return body;
      },
    };
    const recorder = new EventRecorder(api, "test", keptLog().log);
    recorder.post(
      target,
      { type: "Warning", reason: "TaskFailed", message: "task a: x\n\x1b[31my\u2028" },
      at(1),
    );
    await recorder.flush();
    expect(messages).toEqual(["task a: x\\n\\x1b[31my\\u2028"]);
  });
});
