// The Lease rules with an in-memory Lease store that behaves as the API server does for one
// object: 404 until created, 409 on a stale resourceVersion. Time is injected.
import type { V1Lease } from "@kubernetes/client-node";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { LeaderElector, type LeaseApi, microTime } from "../../src/controller/leader-election.js";

class LeaseStore {
  lease: V1Lease | undefined;
  private version = 0;
  readonly api = {
    readNamespacedLease: async () => {
      if (!this.lease) throw Object.assign(new Error("not found"), { code: 404 });
      return structuredClone(this.lease);
    },
    createNamespacedLease: async ({ body }: { body: V1Lease }) => {
      if (this.lease) throw Object.assign(new Error("exists"), { code: 409 });
      return this.store(body);
    },
    replaceNamespacedLease: async ({ body }: { body: V1Lease }) => {
      if (body.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) {
        throw Object.assign(new Error("conflict"), { code: 409 });
      }
      return this.store(body);
    },
  } as unknown as LeaseApi;

  private store(body: V1Lease): V1Lease {
    this.version++;
    this.lease = {
      ...structuredClone(body),
      metadata: { ...body.metadata, resourceVersion: String(this.version) },
    };
    return structuredClone(this.lease);
  }
}

function elector(store: LeaseStore, identity: string, clock: { t: number }) {
  return new LeaderElector({
    coordination: store.api,
    namespace: "ops",
    name: "playbook-controller",
    identity,
    leaseDurationMs: 15_000,
    renewDeadlineMs: 10_000,
    retryPeriodMs: 2_000,
    log: pino({ level: "silent" }),
    now: () => clock.t,
  });
}

describe("leader election on a Lease", () => {
  it("lets exactly one of two replicas lead while the leader renews", async () => {
    const store = new LeaseStore();
    const clock = { t: 1_000_000 };
    const a = elector(store, "a", clock);
    const b = elector(store, "b", clock);
    expect(await a.tryAcquireOrRenew()).toBe(true);
    expect(await b.tryAcquireOrRenew()).toBe(false);
    for (let i = 0; i < 10; i++) {
      clock.t += 2_000;
      expect(await a.tryAcquireOrRenew()).toBe(true);
      expect(await b.tryAcquireOrRenew()).toBe(false);
    }
    expect(store.lease?.spec?.holderIdentity).toBe("a");
  });

  it("gives a standby the Lease only after it went unrenewed for leaseDuration on the standby's clock", async () => {
    const store = new LeaseStore();
    const clock = { t: 1_000_000 };
    const a = elector(store, "a", clock);
    const b = elector(store, "b", clock);
    await a.tryAcquireOrRenew();
    expect(await b.tryAcquireOrRenew()).toBe(false);
    clock.t += 14_000;
    expect(await b.tryAcquireOrRenew()).toBe(false);
    clock.t += 2_000;
    expect(await b.tryAcquireOrRenew()).toBe(true);
    expect(store.lease?.spec).toMatchObject({ holderIdentity: "b", leaseTransitions: 1 });
    expect(await a.tryAcquireOrRenew()).toBe(false);
  });

  it("hands the Lease over at once when the leader releases it", async () => {
    const store = new LeaseStore();
    const clock = { t: 1_000_000 };
    const a = elector(store, "a", clock);
    const b = elector(store, "b", clock);
    expect(await a.acquire(new AbortController().signal)).toBe(true);
    expect(await b.tryAcquireOrRenew()).toBe(false);
    await a.release();
    expect(store.lease?.spec?.holderIdentity).toBe("");
    expect(await b.tryAcquireOrRenew()).toBe(true);
  });

  it("writes times as MicroTime", () => {
    expect(microTime(Date.parse("2026-01-01T00:00:00.123Z"))).toBe("2026-01-01T00:00:00.123000Z");
  });
});
