// Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does: a lease held
// by another is taken only after it went unrenewed for its leaseDurationSeconds as observed on our
// own clock (never by comparing clocks across machines); the leader that cannot renew within
// renewDeadline stops leading; on shutdown the leader releases the Lease so a standby takes over at once.
import type { V1Lease } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { ApiClient } from "./api-client.js";
import { apiErrorMessage, isConflict, isNotFound } from "./kube.js";

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
  now?: () => number;
}

/** RFC 3339 with microseconds, the MicroTime format the API server expects in a Lease. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

interface Observed {
  resourceVersion: string;
  holder: string;
  durationMs: number;
  at: number;
}

export class LeaderElector {
  private readonly options: LeaderElectionOptions;
  private readonly now: () => number;
  private observed: Observed | undefined;
  private leading = false;

  constructor(options: LeaderElectionOptions) {
    this.options = options;
    this.now = options.now ?? Date.now;
  }

  /** Resolves true once this replica leads, false if the signal aborted first. */
  async acquire(signal: AbortSignal): Promise<boolean> {
    const { log, namespace, name, identity } = this.options;
    let logged = false;
    while (!signal.aborted) {
      if (await this.tryAcquireOrRenew()) {
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
   * Renews until renewal fails for renewDeadline (resolves "lost") or the signal aborts ("stopped").
   * Each renew is aborted when the deadline passes, so a renew hanging on a dead connection
   * cannot keep this replica leading beyond it.
   */
  async holdUntilLost(signal: AbortSignal): Promise<"lost" | "stopped"> {
    let lastRenew = this.now();
    while (!signal.aborted) {
      await sleep(this.options.retryPeriodMs, signal);
      if (signal.aborted) break;
      const left = lastRenew + this.options.renewDeadlineMs - this.now();
      if (left > 0 && (await this.tryAcquireOrRenew(AbortSignal.timeout(left)))) {
        lastRenew = this.now();
      } else if (this.now() - lastRenew >= this.options.renewDeadlineMs) {
        this.leading = false;
        this.options.log.error({ name: this.options.name }, "Lost the leader Lease");
        return "lost";
      }
    }
    return "stopped";
  }

  /** Gives the Lease up so a standby can take it without waiting for it to expire. */
  async release(): Promise<void> {
    if (!this.leading) return;
    this.leading = false;
    const { coordination, namespace, name, identity, log } = this.options;
    try {
      const lease = await coordination.readNamespacedLease({ name, namespace });
      if (lease.spec?.holderIdentity !== identity) return;
      const now = microTime(this.now());
      await coordination.replaceNamespacedLease({
        name,
        namespace,
        body: this.leaseBody(lease, {
          holderIdentity: "",
          leaseDurationSeconds: 1,
          renewTime: now,
          acquireTime: now,
        }),
      });
      log.info({ namespace, name }, "Released the leader Lease");
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
    const now = this.now();
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
              acquireTime: microTime(now),
              renewTime: microTime(now),
              leaseTransitions: 0,
            }),
          },
          call,
        );
        this.observe(created, now);
        return true;
      } catch (error) {
        if (!isConflict(error))
          log.warn({ namespace, name, err: apiErrorMessage(error) }, "Failed to create the leader Lease");
        return false;
      }
    }
    const spec = lease.spec ?? {};
    const resourceVersion = lease.metadata?.resourceVersion ?? "";
    if (!this.observed || this.observed.resourceVersion !== resourceVersion) this.observe(lease, now);
    const holder = spec.holderIdentity ?? "";
    const observed = this.observed as Observed;
    if (holder !== "" && holder !== identity && observed.at + observed.durationMs > now) return false;
    const takingOver = holder !== identity;
    const renewed = {
      holderIdentity: identity,
      leaseDurationSeconds: durationSeconds,
      acquireTime: takingOver ? microTime(now) : (serializeTime(spec.acquireTime) ?? microTime(now)),
      renewTime: microTime(now),
      leaseTransitions: (spec.leaseTransitions ?? 0) + (takingOver && holder !== "" ? 1 : 0),
    };
    try {
      const replaced = await coordination.replaceNamespacedLease(
        { name, namespace, body: this.leaseBody(lease, renewed) },
        call,
      );
      this.observe(replaced, now);
      return true;
    } catch (error) {
      if (!isConflict(error))
        log.warn({ namespace, name, err: apiErrorMessage(error) }, "Failed to renew the leader Lease");
      return false;
    }
  }

  private observe(lease: V1Lease, now: number): void {
    this.observed = {
      resourceVersion: lease.metadata?.resourceVersion ?? "",
      holder: lease.spec?.holderIdentity ?? "",
      durationMs: (lease.spec?.leaseDurationSeconds ?? Math.ceil(this.options.leaseDurationMs / 1000)) * 1000,
      at: now,
    };
  }
}

function serializeTime(value: unknown): string | undefined {
  if (value instanceof Date) return microTime(value.getTime());
  if (typeof value === "string" && value !== "") return value;
  return undefined;
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
