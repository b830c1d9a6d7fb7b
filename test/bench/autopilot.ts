// The bench node's autopilot: what the runner and the kubelet would do with each pod, written
// through the API on the scripted node, so that both controllers under measurement see the same
// pod lives and nothing else loads the machine. A pod bound to the node is started at once (as a
// kubelet writes it: Pending with its containers creating, then Running); its tasks take the
// times workloads.ts gives their commands, one after another; the runner's limits (each task's
// timeout, the run ceiling from the plan's run start) cut that short as the runner would; then
// the pod ends with the runner's report for its own plan (exit 0 when every task succeeded, 1
// otherwise). Playbook pods and Job pods carry the same plan and run the same runner, so they live
// the same way. A pod deleted while it runs (the Job controller at a Job's deadline) is ended at
// once, as a kubelet does when the runner exits on SIGTERM.
import { CoreV1Api, type KubeConfig, type V1Pod, Watch } from "@kubernetes/client-node";
import { resolveLimits } from "../../src/api/limits.js";
import { PLAN_ANNOTATION, parsePlan } from "../../src/api/plan.js";
import type { RunnerReason } from "../../src/api/report.js";
import {
  endPod,
  holdPod,
  type ReportScript,
  reportFor,
  reportPod,
  startPod,
} from "../harness/scripted-node.js";

/** How one pod lives: when it ends after its start, and the report the runner writes then. */
export interface PodLife {
  afterMs: number;
  script: ReportScript;
}

/**
 * The runner's course through the plan the pod carries, started at `startedAt`: each task takes
 * `taskMs(run)`, unless its timeout or the run ceiling comes first.
 */
export function lifeOf(pod: V1Pod, startedAt: number, taskMs: (run: string) => number): PodLife {
  const read = parsePlan(pod.metadata?.annotations?.[PLAN_ANNOTATION] ?? "");
  if (!read.ok) throw new Error(`pod ${pod.metadata?.name} carries no plan: ${read.problem}`);
  const { plan } = read;
  const limits = resolveLimits(plan.spec, plan.defaults);
  const ceilingAt =
    limits.ceiling.ms > 0 ? Date.parse(plan.runStartTime) + limits.ceiling.ms : Number.POSITIVE_INFINITY;
  const times: Record<number, { startTime: Date; completionTime: Date }> = {};
  let at = startedAt;
  for (const [index, task] of plan.spec.tasks.entries()) {
    const timeout = limits.tasks[index]?.timeout?.ms;
    const limitAt = Math.min(timeout ? at + timeout : Number.POSITIVE_INFINITY, ceilingAt);
    const doneAt = at + taskMs(task.run);
    if (limitAt < doneAt) {
      const reason: RunnerReason = limitAt === ceilingAt ? "RunCeiling" : "TaskTimeout";
      const end = Math.max(limitAt, startedAt);
      times[index] = { startTime: new Date(at), completionTime: new Date(end) };
      return {
        afterMs: end - startedAt,
        script: {
          reason,
          at: index,
          tasks: times,
          startTime: new Date(startedAt),
          completionTime: new Date(end),
        },
      };
    }
    times[index] = { startTime: new Date(at), completionTime: new Date(doneAt) };
    at = doneAt;
  }
  return {
    afterMs: at - startedAt,
    script: {
      reason: "Succeeded",
      tasks: times,
      startTime: new Date(startedAt),
      completionTime: new Date(at),
    },
  };
}

const isEnded = (pod: V1Pod) => pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed";

export class Autopilot {
  private readonly core: CoreV1Api;
  private readonly watch: Watch;
  /** Pods started, by uid: each is started once. */
  private readonly started = new Set<string>();
  /** Pods ended on deletion, by uid. */
  private readonly killed = new Set<string>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private request: AbortController | undefined;
  private stopped = false;

  private readonly nodeName: string;
  private readonly taskMs: (run: string) => number;
  private readonly log: (message: string) => void;

  constructor(
    kubeConfig: KubeConfig,
    nodeName: string,
    taskMs: (run: string) => number,
    log: (message: string) => void,
  ) {
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.watch = new Watch(kubeConfig);
    this.nodeName = nodeName;
    this.taskMs = taskMs;
    this.log = log;
  }

  /** Lists the node's pods, then follows them; resolves once the watch is open. */
  async start(): Promise<void> {
    const fieldSelector = `spec.nodeName=${this.nodeName}`;
    const list = await this.core.listPodForAllNamespaces({ fieldSelector });
    for (const pod of list.items) this.see(pod);
    let resourceVersion = list.metadata?.resourceVersion ?? "";
    this.request = await this.watch.watch(
      "/api/v1/pods",
      { fieldSelector, resourceVersion, allowWatchBookmarks: true },
      (type: string, pod: V1Pod) => {
        resourceVersion = pod.metadata?.resourceVersion ?? resourceVersion;
        if (type === "ADDED" || type === "MODIFIED") this.see(pod);
        if (type === "DELETED") this.forget(pod);
      },
      (error: unknown) => {
        if (this.stopped) return;
        if (error) this.log(`autopilot: watch ended: ${String(error)}`);
        // Listed again: a pod started or ended meanwhile is seen in its present state.
        setTimeout(() => void this.start().catch((e) => this.log(`autopilot: ${String(e)}`)), 200);
      },
    );
  }

  stop(): void {
    this.stopped = true;
    this.request?.abort();
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  private forget(pod: V1Pod): void {
    const uid = pod.metadata?.uid ?? "";
    clearTimeout(this.timers.get(uid));
    this.timers.delete(uid);
  }

  private see(pod: V1Pod): void {
    if (this.stopped) return;
    const uid = pod.metadata?.uid ?? "";
    if (pod.metadata?.deletionTimestamp) {
      this.forget(pod);
      if (!isEnded(pod) && this.started.has(uid) && !this.killed.has(uid)) {
        this.killed.add(uid);
        void endPod(this.core, pod, { exitCode: 137 }).catch((e) =>
          this.log(`autopilot: kill: ${String(e)}`),
        );
      }
      return;
    }
    if (isEnded(pod) || this.started.has(uid)) return;
    this.started.add(uid);
    void this.live(pod).catch((e) => this.log(`autopilot: ${pod.metadata?.name}: ${String(e)}`));
  }

  private async live(pod: V1Pod): Promise<void> {
    const startedAt = Date.now();
    const life = lifeOf(pod, startedAt, this.taskMs);
    await holdPod(this.core, pod);
    await startPod(this.core, pod, new Date(startedAt));
    const uid = pod.metadata?.uid ?? "";
    if (this.stopped || this.killed.has(uid)) return;
    const end = async () => {
      this.timers.delete(uid);
      if (this.killed.has(uid)) return;
      await reportPod(this.core, pod, reportFor(pod, life.script));
    };
    this.timers.set(
      uid,
      setTimeout(
        () => void end().catch((e) => this.log(`autopilot: ${pod.metadata?.name}: ${String(e)}`)),
        Math.max(0, startedAt + life.afterMs - Date.now()),
      ),
    );
  }
}
