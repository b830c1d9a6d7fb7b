// Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does: a lease held
// by another is taken only after it went unrenewed for its leaseDurationSeconds as observed on our
// own clock (never by comparing clocks across machines); the leader that cannot renew within
// renewDeadline stops leading; on shutdown the leader releases the Lease so a standby takes over at once.
// Every local decision is timed on a monotonic clock, from when this replica saw a change: a wall
// clock stepped by NTP or by hand moves no deadline. The wall clock only stamps the Lease's
// renewTime and acquireTime, which others read but never decide on.
import type { V1Lease } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { ApiClient } from "./api-client.js";
import { apiErrorMessage, isConflict, isNotFound } from "./api-errors.js";

/** The Lease calls leader election makes. */
export type LeaseApi = Pick<
  ApiClient,
  "readNamespacedLease" | "createNamespacedLease" | "replaceNamespacedLease"
>;

export interface LeaderElectionOptions {
  coordination: LeaseApi;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  log: Logger;
  /** Milliseconds since the epoch, only for the times written in the Lease (default Date.now). */
  wallClock?: () => number;
  /** Milliseconds on a clock that never jumps, for every decision (default performance.now). */
  monotonicClock?: () => number;
}

/** RFC 3339 with microseconds, the MicroTime format the API server expects in a Lease. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

interface Observed {
  resourceVersion: string;
  holder: string;
  durationMs: number;
  /** When this replica saw this resourceVersion first, on the monotonic clock. */
  at: number;
}

export class LeaderElector {
  private readonly options: LeaderElectionOptions;
  private readonly wallClock: () => number;
  private readonly monotonic: () => number;
  private observed: Observed | undefined;
  private leading = false;
  /** When the last acquire or renew that succeeded was started (monotonic): the renew deadline counts from it. */
  private renewedAt = 0;

  constructor(options: LeaderElectionOptions) {
    this.options = options;
    this.wallClock = options.wallClock ?? Date.now;
    this.monotonic = options.monotonicClock ?? (() => performance.now());
  }

  /** True from acquire() until the renew deadline passed without a renew, or the Lease was released. */
  get isLeading(): boolean {
    return this.leading;
  }

  /** Resolves true once this replica leads, false if the signal aborted first. */
  async acquire(signal: AbortSignal): Promise<boolean> {
    const { log, namespace, name, identity } = this.options;
    let logged = false;
    while (!signal.aborted) {
      const started = this.monotonic();
      // A call that ignores the signal (an exec credential plugin that never returns) cannot
      // hold up a shutdown: the wait ends with the signal.
      if (await untilAborted(this.tryAcquireOrRenew(signal), signal)) {
        if (signal.aborted) break;
        this.renewedAt = started;
        this.leading = true;
        log.info({ namespace, name, identity }, "Acquired the leader Lease");
        return true;
      }
      if (!logged) {
        log.info({ namespace, name, holder: this.observed?.holder }, "Waiting for the leader Lease");
        logged = true;
      }
      await sleep(this.jittered(this.options.retryPeriodMs), signal);
    }
    return false;
  }

  /**
   * Renews every retryPeriod until the signal aborts ("stopped") or renewDeadline passed since the
   * start of the last renew that succeeded ("lost"). The end of leading comes from a timer, not
   * from a call returning: a renew that hangs (a dead connection, an exec credential plugin that
   * never answers) is abandoned at the deadline, and its signal ends the request where it can.
   */
  async holdUntilLost(signal: AbortSignal): Promise<"lost" | "stopped"> {
    const deadline = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const arm = () => {
      clearTimeout(timer);
      const left = this.renewedAt + this.options.renewDeadlineMs - this.monotonic();
      timer = setTimeout(() => deadline.abort(), Math.max(0, left));
    };
    arm();
    const ended = AbortSignal.any([signal, deadline.signal]);
    try {
      while (!ended.aborted) {
        await sleep(this.options.retryPeriodMs, ended);
        if (ended.aborted) break;
        const started = this.monotonic();
        if ((await untilAborted(this.tryAcquireOrRenew(ended), ended)) && !ended.aborted) {
          this.renewedAt = started;
          arm();
        }
      }
    } finally {
      clearTimeout(timer);
    }
    if (!deadline.signal.aborted) return "stopped";
    this.leading = false;
    this.options.log.error(
      { name: this.options.name, renewDeadlineMs: this.options.renewDeadlineMs },
      "Lost the leader Lease",
    );
    return "lost";
  }

  /**
   * Gives the Lease up so a standby can take it without waiting for it to expire. leaseTransitions
   * stays as it is: it counts changes of leader, and a release is none. Bounded by renewDeadline,
   * as a renew is: a call that hangs cannot hold up the shutdown.
   */
  async release(): Promise<void> {
    if (!this.leading) return;
    this.leading = false;
    const { coordination, namespace, name, identity, log } = this.options;
    const bound = AbortSignal.timeout(this.options.renewDeadlineMs);
    const released = async (): Promise<boolean> => {
      const lease = await coordination.readNamespacedLease({ name, namespace }, { signal: bound });
      if (lease.spec?.holderIdentity !== identity) return false;
      const now = microTime(this.wallClock());
      await coordination.replaceNamespacedLease(
        {
          name,
          namespace,
          body: this.leaseBody(lease, {
            holderIdentity: "",
            leaseDurationSeconds: 1,
            renewTime: now,
            acquireTime: now,
            leaseTransitions: lease.spec?.leaseTransitions ?? 0,
          }),
        },
        { signal: bound },
      );
      return true;
    };
    try {
      const outcome = await untilAborted(released(), bound);
      if (outcome === true) log.info({ namespace, name }, "Released the leader Lease");
      else if (outcome === undefined)
        log.warn(
          { namespace, name, err: `no answer within ${this.options.renewDeadlineMs}ms` },
          "Failed to release the leader Lease",
        );
    } catch (error) {
      log.warn({ namespace, name, err: apiErrorMessage(error) }, "Failed to release the leader Lease");
    }
  }

  private jittered(ms: number): number {
    return ms * (1 + 0.2 * Math.random());
  }

  private leaseBody(lease: V1Lease | undefined, spec: Record<string, unknown>): V1Lease {
    const { namespace, name } = this.options;
    return {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: {
        name,
        namespace,
        ...(lease?.metadata?.resourceVersion ? { resourceVersion: lease.metadata.resourceVersion } : {}),
      },
      // MicroTime fields are sent as preformatted strings (microseconds, as the API server writes them).
      spec: spec as V1Lease["spec"],
    };
  }

  /** One read and, when this replica may hold the Lease, one write; signal ends them early. */
  async tryAcquireOrRenew(signal?: AbortSignal): Promise<boolean> {
    const { coordination, namespace, name, identity, log } = this.options;
    const call = signal ? { signal: signal } : undefined;
    const durationSeconds = Math.ceil(this.options.leaseDurationMs / 1000);
    const stamp = microTime(this.wallClock());
    let lease: V1Lease | undefined;
    try {
      lease = await coordination.readNamespacedLease({ name, namespace }, call);
    } catch (error) {
      if (!isNotFound(error)) {
        log.warn({ namespace, name, err: apiErrorMessage(error) }, "Failed to read the leader Lease");
        return false;
      }
    }
    if (!lease) {
      try {
        const created = await coordination.createNamespacedLease(
          {
            namespace,
            body: this.leaseBody(undefined, {
              holderIdentity: identity,
              leaseDurationSeconds: durationSeconds,
              acquireTime: stamp,
              renewTime: stamp,
              leaseTransitions: 0,
            }),
          },
          call,
        );
        this.observe(created);
        return true;
      } catch (error) {
        if (!isConflict(error))
          log.warn({ namespace, name, err: apiErrorMessage(error) }, "Failed to create the leader Lease");
        return false;
      }
    }
    const spec = lease.spec ?? {};
    const resourceVersion = lease.metadata?.resourceVersion ?? "";
    // Expiry counts from when this replica saw the Lease change, as the answer arrived.
    if (!this.observed || this.observed.resourceVersion !== resourceVersion) this.observe(lease);
    const holder = spec.holderIdentity ?? "";
    const observed = this.observed as Observed;
    if (holder !== "" && holder !== identity && observed.at + observed.durationMs > this.monotonic())
      return false;
    const takingOver = holder !== identity;
    // As client-go counts: every change of holder is a transition, from a released Lease too.
    const renewed = {
      holderIdentity: identity,
      leaseDurationSeconds: durationSeconds,
      acquireTime: takingOver ? stamp : (serializeTime(spec.acquireTime) ?? stamp),
      renewTime: stamp,
      leaseTransitions: (spec.leaseTransitions ?? 0) + (takingOver ? 1 : 0),
    };
    try {
      const replaced = await coordination.replaceNamespacedLease(
        { name, namespace, body: this.leaseBody(lease, renewed) },
        call,
      );
      this.observe(replaced);
      return true;
    } catch (error) {
      if (!isConflict(error))
        log.warn({ namespace, name, err: apiErrorMessage(error) }, "Failed to renew the leader Lease");
      return false;
    }
  }

  private observe(lease: V1Lease): void {
    this.observed = {
      resourceVersion: lease.metadata?.resourceVersion ?? "",
      holder: lease.spec?.holderIdentity ?? "",
      durationMs: (lease.spec?.leaseDurationSeconds ?? Math.ceil(this.options.leaseDurationMs / 1000)) * 1000,
      at: this.monotonic(),
    };
  }
}

function serializeTime(value: unknown): string | undefined {
  if (value instanceof Date) return microTime(value.getTime());
  if (typeof value === "string" && value !== "") return value;
  return undefined;
}

/**
 * The promise's value, or undefined once the signal aborted first. The promise is left to settle
 * on its own (its rejection is handled): what it waits on may never answer.
 */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  promise.catch(() => {});
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise<T | undefined>((resolve, reject) => {
    const aborted = () => resolve(undefined);
    signal.addEventListener("abort", aborted, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", aborted);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", aborted);
        reject(error);
      },
    );
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
