// What a reconcile pass decides (pods to create, stop or delete, one status, events) and from what:
// its input, the run as decided against its plan (RunState), and the two ways a decision writes
// status: settle (the run ended) and progress (it goes on).

import type { LimitDefaults, ResolvedLimits } from "../api/limits.js";
import type { PlaybookSpec, PlaybookStatus } from "../api/playbook.js";
import type { NamespaceRules, PodSettings } from "../api/policy.js";
import type { TerminalReason } from "../api/reasons.js";
import type { RunnerReport } from "../api/report.js";
import type { RecordedEvent } from "../runtime/events.js";
import type { WorkloadView } from "./kueue/workload-view.js";
import type { PodView, StoredPlaybook } from "./objects.js";
import type { ProgressLook } from "./playbook/live-progress.js";
import type { TakenRecord } from "./playbook/progress-bounds.js";
import type { AgentDelivery } from "./pods/agent-delivery.js";
import type { ObservedPlacement } from "./pods/built-pod-difference.js";
import { type FinishedRun, finishEvents, finishedRun } from "./pods/finished-run.js";
import type { MountEvent } from "./pods/missing-source.js";
import type { PodManifest } from "./pods/pod-builder.js";
import type { SlotState } from "./policy/policy-queue.js";
import { type StatusBase, sameStatus } from "./status.js";

export interface ReconcileSettings {
  defaults: LimitDefaults;
  runnerImage: string;
  /** How the pods created now get the agent (the controller's current choice); post-start unless set. */
  agentDelivery?: AgentDelivery;
  /** Whether the pods created now get their own user namespace (hostUsers: false); off unless set. */
  userNamespaces?: boolean;
  /** The runner uploads its own log to the archive (pods/log-upload-volume.ts); off unless set. */
  logUpload?: boolean;
  ttlSecondsAfterFinished: number;
  /** --allowed-service-accounts and --allowed-images: allowed where no policy says otherwise. */
  allowedServiceAccounts?: readonly string[];
  allowedImages?: readonly string[];
  /** --default-queue-name: the Kueue LocalQueue where neither the spec nor the policy names one. */
  defaultQueueName?: string | undefined;
}

export interface ReconcileInput {
  playbook: StoredPlaybook;
  /** Pods this Playbook controls (owner reference), from the cache or confirmed by a live read. */
  pods: readonly PodView[];
  now: Date;
  settings: ReconcileSettings;
  /** What governs the namespace: its PlaybookPolicy named default, else the controller's flags. */
  rules?: NamespaceRules;
  /** The namespace's running-Playbooks cap and who holds its slots, when it has one. */
  slots?: SlotState;
  /**
   * Pod names held by pods this Playbook does not control (a lingering pod of a deleted Playbook
   * of the same name, anyone's pod), as the cache or a create's AlreadyExists showed them.
   */
  takenPodNames?: readonly string[];
  /**
   * The start record of the first pod this controller created for this run and no status records
   * yet (the record rides on the run's next status write): the run is decided as if it were
   * written, so a first pod lost before its record still counts, and is the one the run reads.
   */
  unrecordedStart?: StartRecord;
  /** Kueue's Workloads of the run's pods (kueue/kueue-hold.ts), with --kueue; absent otherwise. */
  workloads?: readonly WorkloadView[];
  /**
   * Where the run's pods found before its record were placed, by pod UID, as the controller read
   * it (pods/observed-placement.ts): their node, their Workload's admitted flavors. A pod absent
   * here may carry no placement that is not the builder's (playbook/trusted-pod.ts).
   */
  placements?: Readonly<Record<string, ObservedPlacement>>;
  /** What a look at the recorded pod's runner log found this pass (live-progress.ts), when one was due. */
  progress?: ProgressLook;
  /**
   * The kubelet's FailedMount events, by pod UID, read this pass for the pods waiting for their
   * volumes (pods/missing-source.ts): a missing secret or configMap volume is said there alone.
   */
  mountEvents?: Readonly<Record<string, readonly MountEvent[]>>;
}

/** What a first pod's create puts on record: the run's start, its pod and its plan. */
export type StartRecord = Required<
  Pick<PlaybookStatus, "startTime" | "podName" | "podUID" | "podAttempts" | "planDigest">
> &
  Pick<PlaybookStatus, "limits">;

export type Action =
  /** planDigest: the digest of the plan the pod carries, as status.planDigest records it. */
  | {
      type: "createPod";
      pod: PodManifest;
      attempt: number;
      planDigest: string;
      /** The runner uploads its log: its plan's Secret is made first, for this cap and this long. */
      logUpload?: { capBytes: number; validForSeconds: number };
    }
  | { type: "deletePod"; name: string; gracePeriodSeconds?: number; why: "cancel" | "ttl" | "finished" }
  /** Cancel: the kubelet stops the pod at its lowered deadline and keeps it for its logs. */
  | { type: "lowerDeadline"; name: string; activeDeadlineSeconds: number }
  /** The controller is done with the pod: its finalizer comes off (kueue/kueue-finalizer.ts). */
  | { type: "releasePod"; name: string };

export interface Decision {
  /** The status to write, or null when it would not change. */
  status: PlaybookStatus | null;
  /**
   * The status the run would show when the decision writes none (a first pod's create, whose
   * start record rides on the next status write): written only if the create fails.
   */
  pending?: PlaybookStatus;
  actions: Action[];
  events: RecordedEvent[];
  finished?: FinishedRun;
  requeueAfterMs?: number;
  /** The progress record the status now shows: an older one of this pod is not news after it. */
  progressTaken?: { podUID: string } & TakenRecord;
  /** Kueue stopped the run's pod (kueue-preemption.ts): why, as its Workload's Evicted reason. */
  preempted?: { reason: string };
  /** Kueue admitted the run's pod this pass: its LocalQueue and how long it waited (kueue-hold.ts). */
  admitted?: { queue: string; waitSeconds: number };
  /** The runner's report that decided the run, trusted: the log archive keeps it beside the log. */
  trustedReport?: { podUID: string; report: RunnerReport };
}

export interface RunState {
  base: StatusBase & { limits: ResolvedLimits };
  /** The spec the run is decided against: its pod's plan once a pod exists. */
  spec: PlaybookSpec;
  /** The defaults the plan's limits were resolved with. */
  defaults: LimitDefaults;
  /** Default task image, service account, resources and backoffLimit: the spec's, else the policy's, else the controller's. */
  pod: PodSettings;
  /** Per task (by index), the image it runs in. */
  taskImages: readonly string[];
  /** Per finally task (by index), the image it runs in. */
  finallyImages: readonly string[];
  /** Per task, main then finally, the container it runs in (task-K): several may share an image. */
  taskContainers?: readonly string[];
  /** The Playbook's generation the spec is from. */
  specGeneration: number | undefined;
  /** spec.cancel as the Playbook says now: the one field that may change during a run. */
  cancel: boolean;
  input: ReconcileInput;
  attempts: number;
  startTime: string;
  /** The plan's digest the status records; undefined for a run that has not recorded one yet. */
  planDigest: string | undefined;
}

/** How long past its activeDeadlineSeconds a running pod may go before the controller acts. */
export const BACKSTOP_SLACK_MS = 30_000;

export function settle(
  base: StatusBase,
  next: PlaybookStatus,
  reason: TerminalReason,
  extra: Partial<Decision> & { policyRefusals?: string[]; fromReport?: boolean } = {},
): Decision {
  const finished = finishedRun(next, reason, base.limits, extra.fromReport === true);
  if (extra.policyRefusals) finished.policyRefusals = extra.policyRefusals;
  return {
    status: next,
    actions: extra.actions ?? [],
    events: [...(extra.events ?? []), ...finishEvents(next, reason, base.limits)],
    finished,
  };
}

export function progress(base: StatusBase, next: PlaybookStatus, extra: Partial<Decision> = {}): Decision {
  return {
    status: sameStatus(base.previous, next) ? null : next,
    actions: extra.actions ?? [],
    events: extra.events ?? [],
    ...(extra.requeueAfterMs !== undefined ? { requeueAfterMs: extra.requeueAfterMs } : {}),
    ...(extra.progressTaken ? { progressTaken: extra.progressTaken } : {}),
  };
}

export function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
