// Watches pods, Playbooks and Jobs in every namespace and records when this process first saw
// each state that a measurement times: a pod existing, a pod terminated, an owner finished. Both
// controllers are timed by this one observer, so its own delay counts the same for each.
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import type { Api } from "./api.js";

const Condition = z.looseObject({ type: z.string(), status: z.string(), reason: z.string().optional() });
const ObjectSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string(),
    resourceVersion: z.string().optional(),
    annotations: z.record(z.string(), z.string()).optional(),
    ownerReferences: z.array(z.looseObject({ kind: z.string(), name: z.string() })).optional(),
  }),
  spec: z.looseObject({ activeDeadlineSeconds: z.number().optional() }).optional(),
  status: z
    .looseObject({
      phase: z.string().optional(),
      startTime: z.string().optional(),
      conditions: z.array(Condition).nullable().optional(),
    })
    .optional(),
});
type Observed = z.infer<typeof ObjectSchema>;
const EventSchema = z.looseObject({ type: z.string(), object: z.unknown() });

export type OwnerKind = "Playbook" | "Job";
export const ownerKey = (kind: OwnerKind, namespace: string, name: string) => `${kind}/${namespace}/${name}`;

export interface PodTimes {
  seenAt: number;
  terminatedAt?: number;
  owner?: string;
  /** The run start the controller put on its pod (milliseconds). */
  runStart?: string;
}

export interface OwnerEnd {
  at: number;
  reason: string;
  /** The Job's status.startTime (whole seconds), which its deadline counts from. */
  startTime?: string;
  activeDeadlineSeconds?: number;
}

const WATCHES: { path: string; kind: "Pod" | OwnerKind }[] = [
  { path: "/api/v1/pods", kind: "Pod" },
  { path: "/apis/playbook.dev/v1alpha1/playbooks", kind: "Playbook" },
  { path: "/apis/batch/v1/jobs", kind: "Job" },
];

export class Observer {
  readonly pods = new Map<string, PodTimes>();
  readonly ended = new Map<string, OwnerEnd>();
  private readonly podsPerNamespace = new Map<string, number>();
  private readonly abort = new AbortController();
  private readonly loops: Promise<void>[] = [];
  private waiters: (() => void)[] = [];

  private readonly api: Api;
  constructor(api: Api) {
    this.api = api;
  }

  start(): void {
    for (const watch of WATCHES) this.loops.push(this.watch(watch.path, watch.kind));
  }

  async stop(): Promise<void> {
    this.abort.abort();
    await Promise.allSettled(this.loops);
  }

  podCount(namespace: string): number {
    return this.podsPerNamespace.get(namespace) ?? 0;
  }

  /** Resolves once `check` holds, checked on every event; rejects after `timeoutMs`. */
  async until(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(remaining, 1_000));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  private notify(): void {
    for (const waiter of this.waiters.splice(0)) waiter();
  }

  private async watch(path: string, kind: "Pod" | OwnerKind): Promise<void> {
    let resourceVersion = "";
    while (!this.abort.signal.aborted) {
      const query = `?watch=true&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion=${resourceVersion}`;
      try {
        await this.api.watchLines(path + query, this.abort.signal, (line) => {
          const now = performance.timeOrigin + performance.now();
          const event = EventSchema.safeParse(JSON.parse(line));
          if (!event.success) return;
          if (event.data.type === "ERROR") {
            resourceVersion = ""; // Expired: start over; first sightings are kept.
            return;
          }
          const object = ObjectSchema.safeParse(event.data.object);
          if (!object.success) return;
          resourceVersion = object.data.metadata.resourceVersion ?? resourceVersion;
          if (event.data.type === "BOOKMARK" || event.data.type === "DELETED") return;
          if (kind === "Pod") this.seePod(object.data, now);
          else this.seeOwner(kind, object.data, now);
          this.notify();
        });
      } catch {
        if (!this.abort.signal.aborted) await sleep(200);
      }
    }
  }

  private seePod(pod: Observed, now: number): void {
    const { namespace, name } = pod.metadata;
    const key = `${namespace}/${name}`;
    let times = this.pods.get(key);
    if (!times) {
      const owner = pod.metadata.ownerReferences?.find((o) => o.kind === "Playbook" || o.kind === "Job");
      times = { seenAt: now };
      if (owner) times.owner = ownerKey(owner.kind as OwnerKind, namespace, owner.name);
      const runStart = pod.metadata.annotations?.["playbook.dev/run-start-time"];
      if (runStart) times.runStart = runStart;
      this.pods.set(key, times);
      this.podsPerNamespace.set(namespace, this.podCount(namespace) + 1);
    }
    const phase = pod.status?.phase;
    if (times.terminatedAt === undefined && (phase === "Succeeded" || phase === "Failed"))
      times.terminatedAt = now;
  }

  private seeOwner(kind: OwnerKind, owner: Observed, now: number): void {
    const key = ownerKey(kind, owner.metadata.namespace, owner.metadata.name);
    if (this.ended.has(key)) return;
    const conditions = owner.status?.conditions ?? [];
    const terminal =
      kind === "Playbook"
        ? conditions.find((c) => c.type === "Succeeded" && c.status !== "Unknown")
        : conditions.find((c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True");
    if (!terminal) return;
    const end: OwnerEnd = { at: now, reason: terminal.reason ?? terminal.type };
    if (owner.status?.startTime) end.startTime = owner.status.startTime;
    if (owner.spec?.activeDeadlineSeconds !== undefined)
      end.activeDeadlineSeconds = owner.spec.activeDeadlineSeconds;
    this.ended.set(key, end);
  }
}
