// The Lease rules with an in-memory Lease store that behaves as the API server does for one
// object: 404 until created, 409 on a stale resourceVersion. Both clocks are injected (the wall
// clock stamps the Lease, the monotonic one decides), or, where the defaults are what is tested,
// the wall clock is moved under them with vitest's fake Date.
import type { V1Lease } from "@kubernetes/client-node";
import { pino } from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { LeaderElector, type LeaseApi, microTime } from "../../src/runtime/leader-election.js";

class LeaseStore {
  lease: V1Lease | undefined;
  /** "hang": every call from now on never answers, its signal ignored (an exec plugin that never returns). */
  fault: "none" | "fail" | "hang" = "none";
  private version = 0;
  readonly api = {
    readNamespacedLease: async () => {
      await this.faulted();
      if (!this.lease) throw Object.assign(new Error("not found"), { code: 404 });
      return structuredClone(this.lease);
    },
    createNamespacedLease: async ({ body }: { body: V1Lease }) => {
      await this.faulted();
      if (this.lease) throw Object.assign(new Error("exists"), { code: 409 });
      return this.store(body);
    },
    replaceNamespacedLease: async ({ body }: { body: V1Lease }) => {
      await this.faulted();
      if (body.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) {
        throw Object.assign(new Error("conflict"), { code: 409 });
      }
      return this.store(body);
    },
  } as unknown as LeaseApi;

  private faulted(): Promise<void> {
    if (this.fault === "fail") throw Object.assign(new Error("internal error"), { code: 500 });
    if (this.fault === "hang") return new Promise(() => {});
    return Promise.resolve();
  }

  private store(body: V1Lease): V1Lease {
    this.version++;
    this.lease = {
      ...structuredClone(body),
      metadata: { ...body.metadata, resourceVersion: String(this.version) },
    };
    return structuredClone(this.lease);
  }
}

/** wall: what the Lease is stamped with; mono: what decides. Either can be moved on its own. */
interface Clocks {
  wall: number;
  mono: number;
}

function elector(store: LeaseStore, identity: string, clock: Clocks) {
  return new LeaderElector({
    coordination: store.api,
    namespace: "ops",
    name: "playbook-controller",
    identity,
    leaseDurationMs: 15_000,
    renewDeadlineMs: 10_000,
    retryPeriodMs: 2_000,
    log: pino({ level: "silent" }),
    wallClock: () => clock.wall,
    monotonicClock: () => clock.mono,
  });
}

function tick(clock: Clocks, ms: number): void {
  clock.wall += ms;
  clock.mono += ms;
}

/** An elector on the real clocks (the defaults), with short periods so its timers run in the test. */
function fastElector(store: LeaseStore, identity: string) {
  return new LeaderElector({
    coordination: store.api,
    namespace: "ops",
    name: "playbook-controller",
    identity,
    leaseDurationMs: 1_500,
    renewDeadlineMs: 1_000,
    retryPeriodMs: 100,
    log: pino({ level: "silent" }),
  });
}

/** "lost" or "stopped" once holdUntilLost resolves, or "leading" if it has not within ms. */
function outcomeWithin(held: Promise<"lost" | "stopped">, ms: number): Promise<string> {
  return Promise.race([held, new Promise<string>((resolve) => setTimeout(() => resolve("leading"), ms))]);
}

afterEach(() => {
  vi.useRealTimers();
});

describe("leader election on a Lease", () => {
  it("lets exactly one of two replicas lead while the leader renews", async () => {
    const store = new LeaseStore();
    const clock = { wall: Date.parse("2026-12-01T00:00:00Z"), mono: 1_000 };
    const a = elector(store, "a", clock);
    const b = elector(store, "b", clock);
    expect(await a.tryAcquireOrRenew()).toBe(true);
    expect(await b.tryAcquireOrRenew()).toBe(false);
    for (let i = 0; i < 10; i++) {
      tick(clock, 2_000);
      expect(await a.tryAcquireOrRenew()).toBe(true);
      expect(await b.tryAcquireOrRenew()).toBe(false);
    }
    expect(store.lease?.spec?.holderIdentity).toBe("a");
  });

  it("gives a standby the Lease only after it went unrenewed for leaseDuration on the standby's clock", async () => {
    const store = new LeaseStore();
    const clock = { wall: Date.parse("2026-12-01T00:00:00Z"), mono: 1_000 };
    const a = elector(store, "a", clock);
    const b = elector(store, "b", clock);
    await a.tryAcquireOrRenew();
    expect(await b.tryAcquireOrRenew()).toBe(false);
    tick(clock, 14_000);
    expect(await b.tryAcquireOrRenew()).toBe(false);
    tick(clock, 2_000);
    expect(await b.tryAcquireOrRenew()).toBe(true);
    expect(store.lease?.spec).toMatchObject({ holderIdentity: "b", leaseTransitions: 1 });
    expect(await a.tryAcquireOrRenew()).toBe(false);
  });

  it("hands the Lease over at once when the leader releases it", async () => {
    const store = new LeaseStore();
    const clock = { wall: Date.parse("2026-12-01T00:00:00Z"), mono: 1_000 };
    const a = elector(store, "a", clock);
    const b = elector(store, "b", clock);
    expect(await a.acquire(new AbortController().signal)).toBe(true);
    expect(await b.tryAcquireOrRenew()).toBe(false);
    await a.release();
    expect(store.lease?.spec?.holderIdentity).toBe("");
    expect(await b.tryAcquireOrRenew()).toBe(true);
  });

  it("keeps leaseTransitions when it releases the Lease, and counts the next holder as a transition", async () => {
    const store = new LeaseStore();
    const clock = { wall: Date.parse("2026-12-01T00:00:00Z"), mono: 1_000 };
    const a = elector(store, "a", clock);
    const b = elector(store, "b", clock);
    expect(await a.acquire(new AbortController().signal)).toBe(true);
    expect(await b.tryAcquireOrRenew()).toBe(false);
    tick(clock, 16_000);
    expect(await b.acquire(new AbortController().signal)).toBe(true);
    expect(store.lease?.spec).toMatchObject({ holderIdentity: "b", leaseTransitions: 1 });
    await b.release();
    expect(store.lease?.spec).toMatchObject({ holderIdentity: "", leaseTransitions: 1 });
    expect(await a.tryAcquireOrRenew()).toBe(true);
    expect(store.lease?.spec).toMatchObject({ holderIdentity: "a", leaseTransitions: 2 });
  });

  it("stamps the Lease with the wall clock and decides expiry on the monotonic one", async () => {
    const store = new LeaseStore();
    const clock = { wall: Date.parse("2026-12-01T00:00:00Z"), mono: 1_000 };
    const a = elector(store, "a", clock);
    const b = elector(store, "b", clock);
    expect(await a.tryAcquireOrRenew()).toBe(true);
    expect(store.lease?.spec?.renewTime).toBe("2026-12-01T00:00:00.000000Z");
    expect(await b.tryAcquireOrRenew()).toBe(false);
    // An NTP step of a day forward: the Lease says so, but no one's lease has expired.
    clock.wall += 86_400_000;
    expect(await b.tryAcquireOrRenew()).toBe(false);
    expect(store.lease?.spec?.holderIdentity).toBe("a");
    // Time passing on the monotonic clock alone does expire it.
    clock.mono += 16_000;
    expect(await b.tryAcquireOrRenew()).toBe(true);
    expect(store.lease?.spec?.renewTime).toBe("2026-12-02T00:00:00.000000Z");
  });
});

it("writes times as MicroTime", () => {
  expect(microTime(Date.parse("2026-01-01T00:00:00.123Z"))).toBe("2026-01-01T00:00:00.123000Z");
});

describe("leader election on the real clocks while the wall clock jumps", () => {
  it("a standby does not take a renewed Lease when the wall clock jumps an hour forward", async () => {
    vi.useFakeTimers({ toFake: ["Date"], now: Date.parse("2026-12-01T00:00:00Z") });
    const store = new LeaseStore();
    const a = fastElector(store, "a");
    const b = fastElector(store, "b");
    expect(await a.tryAcquireOrRenew()).toBe(true);
    expect(await b.tryAcquireOrRenew()).toBe(false);
    vi.setSystemTime(Date.now() + 3_600_000);
    expect(await b.tryAcquireOrRenew()).toBe(false);
    expect(store.lease?.spec?.holderIdentity).toBe("a");
  });

  it("a leader keeps leading across a forward jump, and still stops at its renew deadline after a backward one", async () => {
    vi.useFakeTimers({ toFake: ["Date"], now: Date.parse("2026-12-01T00:00:00Z") });
    const store = new LeaseStore();
    const a = fastElector(store, "a");
    expect(await a.acquire(new AbortController().signal)).toBe(true);
    const stop = new AbortController();
    const held = a.holdUntilLost(stop.signal);
    vi.setSystemTime(Date.now() + 3_600_000);
    // Three renew deadlines with renewals every 100ms: still the leader.
    expect(await outcomeWithin(held, 3_000)).toBe("leading");
    expect(a.isLeading).toBe(true);
    vi.setSystemTime(Date.now() - 7_200_000);
    store.fault = "fail";
    const failedAt = performance.now();
    expect(await outcomeWithin(held, 5_000)).toBe("lost");
    // Lost at the last renew + renewDeadline (1s): within it plus one retry period and slack.
    expect(performance.now() - failedAt).toBeLessThan(1_000 + 100 + 700);
    expect(a.isLeading).toBe(false);
  });
});

describe("a renew that never returns", () => {
  it("ends leading at the last renew + renewDeadline, by a timer, though the call never answers", async () => {
    const store = new LeaseStore();
    const a = fastElector(store, "a");
    expect(await a.acquire(new AbortController().signal)).toBe(true);
    const held = a.holdUntilLost(new AbortController().signal);
    expect(await outcomeWithin(held, 500)).toBe("leading");
    const lastRenew = Date.parse(store.lease?.spec?.renewTime as unknown as string);
    store.fault = "hang";
    expect(await outcomeWithin(held, 3_000)).toBe("lost");
    const stoppedAfterRenew = Date.now() - lastRenew;
    expect(stoppedAfterRenew).toBeGreaterThanOrEqual(1_000 - 50);
    expect(stoppedAfterRenew).toBeLessThan(1_000 + 500);
    expect(a.isLeading).toBe(false);
  });

  it("does not hold up a release: release gives up at renewDeadline", async () => {
    const store = new LeaseStore();
    const a = fastElector(store, "a");
    expect(await a.acquire(new AbortController().signal)).toBe(true);
    store.fault = "hang";
    const started = performance.now();
    await a.release();
    expect(performance.now() - started).toBeLessThan(1_000 + 500);
  });
});
