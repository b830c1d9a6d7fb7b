// Kueue's Workloads, watched with --kueue: the one Kueue made for a run's pod carries Kueue's words
// while the run is queued (kueue-hold.ts) and when it was admitted. Indexed by the pod that owns
// each; a change wakes the Playbook of that pod. Kueue may be absent, or installed later: without
// its CRD the controller goes on without Kueue's words, says so once, and looks again now and then.
import type { Logger } from "pino";
import { z } from "zod";
import type { ApiClient } from "../../runtime/api-client.js";
import { describeApiFailure, isNotFound, statusCodeOf } from "../../runtime/api-errors.js";
import { Informer } from "../../runtime/informer.js";
import type { PodView } from "../objects.js";
import { WORKLOAD_GROUP, WORKLOAD_PLURAL, WORKLOAD_VERSION } from "./kueue-names.js";
import type { WorkloadView } from "./workload-view.js";

const LIST_PAGE = 500;
/** How often the controller looks again for Workloads it was not allowed or able to list. */
export const WORKLOAD_PROBE_MS = 60_000;

const WorkloadSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string().optional(),
    resourceVersion: z.string().optional(),
    ownerReferences: z
      .array(z.looseObject({ uid: z.string(), kind: z.string().optional(), name: z.string().optional() }))
      .optional(),
  }),
  status: z
    .looseObject({
      conditions: z
        .array(
          z.looseObject({
            type: z.string(),
            status: z.string(),
            reason: z.string().optional(),
            message: z.string().optional(),
            lastTransitionTime: z.string().optional(),
          }),
        )
        .optional(),
      admission: z
        .looseObject({
          podSetAssignments: z
            .array(z.looseObject({ name: z.string(), flavors: z.record(z.string(), z.string()).optional() }))
            .optional(),
        })
        .optional(),
    })
    .optional(),
});
type CachedWorkload = z.infer<typeof WorkloadSchema>;

/**
 * Only what the controller reads is cached (its owner, its conditions, the flavors it was admitted
 * with): a Workload also holds its pod sets' whole templates.
 */
function ownersAndConditions(raw: unknown): unknown {
  const workload = WorkloadSchema.safeParse(raw);
  if (!workload.success) return raw;
  const { name, namespace, resourceVersion, ownerReferences } = workload.data.metadata;
  return {
    metadata: {
      name,
      namespace,
      resourceVersion,
      ownerReferences: ownerReferences?.map(({ uid, kind, name }) => ({ uid, kind, name })),
    },
    status: {
      conditions: workload.data.status?.conditions,
      ...(workload.data.status?.admission
        ? {
            admission: {
              podSetAssignments: workload.data.status.admission.podSetAssignments?.map(
                ({ name, flavors }) => ({ name, flavors }),
              ),
            },
          }
        : {}),
    },
  };
}

/** The pod a Workload belongs to (Kueue's plain-pod integration makes the pod its owner). */
function ownerPod(workload: CachedWorkload): { uid: string; name?: string | undefined } | undefined {
  return workload.metadata.ownerReferences?.find((owner) => owner.kind === "Pod");
}

const podIndex = (namespace: string, uid: string) => `${namespace}/${uid}`;

export interface WorkloadCacheOptions {
  /** The namespaces the controller watches; [""] for all. */
  namespaces: readonly string[];
  api: ApiClient;
  log: Logger;
  watchTimeoutMs: number;
  /** A Workload of the pod named here changed (or went): its Playbook looks again. */
  onChange: (namespace: string, podName: string) => void;
  onProblemChange?: () => void;
  onReconnect?: (cause: "timeout" | "error" | "silent") => void;
  onRelist?: () => void;
  probeMs?: number;
}

export class WorkloadCache {
  private readonly options: WorkloadCacheOptions;
  private readonly informers = new Map<string, Informer<CachedWorkload>>();
  private started = false;
  private stopped = false;
  private said = false;
  private probeTimer: NodeJS.Timeout | undefined;

  constructor(options: WorkloadCacheOptions) {
    this.options = options;
  }

  private pathOf(namespace: string): string {
    const group = `/apis/${WORKLOAD_GROUP}/${WORKLOAD_VERSION}`;
    return namespace ? `${group}/namespaces/${namespace}/${WORKLOAD_PLURAL}` : `${group}/${WORKLOAD_PLURAL}`;
  }

  /**
   * Starts the watches when Workloads can be listed; otherwise says why once and looks again
   * every probeMs. Resolves after the first look, not the first list (waitForSync).
   */
  async start(): Promise<void> {
    if (await this.probe()) this.startInformers();
    else this.scheduleProbe();
  }

  private scheduleProbe(): void {
    if (this.stopped) return;
    this.probeTimer = setTimeout(async () => {
      if (await this.probe()) this.startInformers();
      else this.scheduleProbe();
    }, this.options.probeMs ?? WORKLOAD_PROBE_MS);
    this.probeTimer.unref();
  }

  /** Whether the first namespace's Workloads can be listed now; says once why not. */
  private async probe(): Promise<boolean> {
    const namespace = this.options.namespaces[0] ?? "";
    try {
      await this.options.api.listPage(this.pathOf(namespace), { limit: 1 });
      if (this.said) this.options.log.info({}, "Kueue's Workloads can be read now: watching them");
      return true;
    } catch (error) {
      if (!this.said) {
        const why = isNotFound(error)
          ? `${WORKLOAD_PLURAL}.${WORKLOAD_GROUP}/${WORKLOAD_VERSION} is not served (Kueue is not installed, or too old to serve v1beta2)`
          : statusCodeOf(error) === 403
            ? `the controller may not list ${WORKLOAD_PLURAL}.${WORKLOAD_GROUP} (the chart grants it with config.kueue=true)`
            : describeApiFailure(error);
        this.options.log.warn(
          { reason: why },
          "--kueue: cannot read Kueue's Workloads; queued runs are shown without Kueue's words until it can (looked at again every minute)",
        );
        this.said = true;
      }
      return false;
    }
  }

  private startInformers(): void {
    if (this.started || this.stopped) return;
    this.started = true;
    for (const namespace of this.options.namespaces) {
      const path = this.pathOf(namespace);
      const informer = new Informer<CachedWorkload>({
        resource: WORKLOAD_PLURAL,
        api: this.options.api,
        watchPath: path,
        list: (cont) => this.options.api.listPage(path, { limit: LIST_PAGE, continue: cont }),
        parse: (raw) => {
          const parsed = WorkloadSchema.safeParse(raw);
          return parsed.success ? parsed.data : null;
        },
        transform: ownersAndConditions,
        keyOf: (w) => `${w.metadata.namespace ?? ""}/${w.metadata.name}`,
        resourceVersionOf: (w) => w.metadata.resourceVersion,
        indexOf: (w) => {
          const pod = ownerPod(w);
          return pod ? podIndex(w.metadata.namespace ?? "", pod.uid) : null;
        },
        watchTimeoutMs: this.options.watchTimeoutMs,
        resyncMs: 0,
        log: this.options.log,
        ...(this.options.onReconnect ? { onReconnect: this.options.onReconnect } : {}),
        ...(this.options.onRelist ? { onRelist: this.options.onRelist } : {}),
        ...(this.options.onProblemChange ? { onProblemChange: this.options.onProblemChange } : {}),
      });
      const changed = (workload: CachedWorkload) => {
        const pod = ownerPod(workload);
        if (pod?.name) this.options.onChange(workload.metadata.namespace ?? "", pod.name);
      };
      informer.addHandlers({ onUpsert: changed, onDelete: changed });
      this.informers.set(namespace, informer);
      informer.start();
    }
  }

  /** Resolves when the watches have listed once, or at once while Workloads cannot be read. */
  async waitForSync(): Promise<void> {
    await Promise.all([...this.informers.values()].map((informer) => informer.waitForSync()));
  }

  /** Why the Workload cache is not current, for /readyz; nothing while Kueue is absent (said in the log). */
  problems(): string[] {
    return [...this.informers].flatMap(([namespace, informer]) =>
      informer.problem === undefined
        ? []
        : [`${WORKLOAD_PLURAL}${namespace ? ` in ${namespace}` : ""}: ${informer.problem}`],
    );
  }

  /** The Workloads of these pods, as far as the cache has seen them. */
  of(pods: readonly PodView[]): WorkloadView[] {
    return pods.flatMap((pod) => {
      const uid = pod.metadata.uid;
      const namespace = pod.metadata.namespace ?? "";
      if (!uid) return [];
      const informer = this.informers.get(namespace) ?? this.informers.get("");
      return informer?.byIndex(podIndex(namespace, uid)) ?? [];
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.probeTimer) clearTimeout(this.probeTimer);
    await Promise.all([...this.informers.values()].map((informer) => informer.stop()));
  }
}
