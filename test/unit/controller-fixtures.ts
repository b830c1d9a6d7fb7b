// Playbooks and pods as the API server would hand them to the controller, for table tests.
import { exitCodeForReason } from "../../src/api/exit-codes.js";
import { type LimitDefaults, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema, type PlaybookStatus } from "../../src/api/playbook.js";
import { type PolicySpec, PolicySpecSchema, policyRules } from "../../src/api/policy.js";
import { encodeReport, type RunOutcome, type TaskOutcome } from "../../src/api/report.js";
import type { Decision } from "../../src/controller/decision.js";
import type { PodView, StoredPlaybook } from "../../src/controller/objects.js";
import { planDefaults } from "../../src/controller/plan-digest.js";
import {
  type Action,
  decide,
  type ReconcileInput,
  type ReconcileSettings,
} from "../../src/controller/playbook/reconcile.js";
import { buildPod } from "../../src/controller/pods/pod-builder.js";

export const T0 = new Date("2026-01-01T00:00:00.000Z");
export const at = (seconds: number) => new Date(T0.getTime() + seconds * 1000);

export const SETTINGS: ReconcileSettings = {
  defaults: { ceilingMs: 3_600_000, maxCeilingMs: 86_400_000, stallMs: 600_000, killGraceMs: 10_000 },
  runnerImage: "runner:test",
  ttlSecondsAfterFinished: 3600,
};

/** The spec of playbook() without changes, and the plan of pod() unless told otherwise. */
export const SPEC = {
  ceiling: "30m",
  tasks: [
    { name: "build", run: "make", timeout: "10m" },
    { name: "test", run: "make test" },
  ],
};

export function playbook(
  spec: Record<string, unknown> = {},
  status?: PlaybookStatus,
  generation = 1,
): StoredPlaybook {
  return {
    apiVersion: "playbook.dev/v1alpha1",
    kind: "Playbook",
    metadata: { name: "nightly", namespace: "ops", uid: "uid-1", generation, resourceVersion: "10" },
    spec: { ...SPEC, ...spec },
    ...(status ? { status } : {}),
  };
}

export function pod(
  attempt: number,
  options: {
    phase?: string;
    reason?: string;
    message?: string;
    terminated?: {
      exitCode: number;
      reason?: string;
      message?: string;
      startedAt?: string;
      finishedAt?: string;
    };
    deleting?: boolean;
    runStart?: Date;
    /** Its plan's queuedMs: the time the run's earlier pods waited in Kueue's queue. */
    queuedMs?: number;
    /** The spec the pod was started with (its plan); SPEC unless told. */
    spec?: Record<string, unknown>;
    /** When the node started it, and its activeDeadlineSeconds. */
    startedAt?: Date;
    activeDeadlineSeconds?: number;
    /** The node the scheduler bound it to. */
    nodeName?: string;
    /** Its creationTimestamp, which a pod the run has not recorded yet is checked with. */
    created?: Date;
    /** The defaults its limits resolved with (a policy's among them); SETTINGS' unless told. */
    defaults?: LimitDefaults;
  } = {},
): PodView {
  const spec = PlaybookSpecSchema.parse(options.spec ?? SPEC);
  const limits = resolveLimits(spec, options.defaults ?? SETTINGS.defaults);
  const manifest = buildPod({
    playbook: { name: "nightly", namespace: "ops", uid: "uid-1" },
    spec,
    limits,
    // As the controller builds a plan: its defaults are the run's resolved limits.
    defaults: planDefaults(limits),
    attempt,
    runStart: options.runStart ?? T0,
    queuedMs: options.queuedMs,
    now: T0,
    runnerImage: "runner:test",
  });
  const view: PodView = {
    metadata: {
      ...manifest.metadata,
      uid: `pod-uid-${attempt}`,
      resourceVersion: "5",
      ...(options.created ? { creationTimestamp: options.created.toISOString() } : {}),
    },
    // The spec as built: a pod the run has not recorded yet is checked against it, field for field.
    spec: { ...manifest.spec },
    status: { phase: options.phase ?? "Running" },
  };
  if (options.activeDeadlineSeconds !== undefined)
    view.spec = { ...view.spec, activeDeadlineSeconds: options.activeDeadlineSeconds };
  if (options.nodeName) view.spec = { ...view.spec, nodeName: options.nodeName };
  if (options.startedAt) view.status = { ...view.status, startTime: options.startedAt.toISOString() };
  if (options.deleting) view.metadata.deletionTimestamp = at(1).toISOString();
  if (options.reason) view.status = { ...view.status, reason: options.reason, message: options.message };
  if (options.terminated) {
    view.status = {
      ...view.status,
      containerStatuses: [{ name: "runner", state: { terminated: options.terminated } }],
    };
  }
  return view;
}

/** The exit code the runner exits with after reporting `reason` (src/api/exit-codes.ts). */
export const exitCodeOf = (outcome: { reason: string }) => exitCodeForReason(outcome.reason);

export function report(
  outcome: Partial<RunOutcome> & Pick<RunOutcome, "reason" | "phase" | "tasks">,
): string {
  return encodeReport({ startTime: T0, completionTime: at(60), ...outcome });
}

/**
 * The status a run shows once its start record is written: what the first decision put on record
 * (its status, or the record a first create leaves pending), with the pod of attempt `attempts`
 * as pod() names it (the writer adds the UID).
 */
export function recordedStatus(first: Decision, attempts = 1): PlaybookStatus {
  return {
    ...((first.status ?? first.pending) as PlaybookStatus),
    podAttempts: attempts,
    podName: `nightly-${attempts}`,
    podUID: `pod-uid-${attempts}`,
  };
}

export const POSTGRES = "postgres:16";
/** build runs in the runner image (task-1, uid 1000), test in postgres (task-2, uid 1001). */
export const TWO_IMAGE_SPEC = {
  ceiling: "30m",
  tasks: [
    { name: "build", run: "make" },
    { name: "test", run: "psql -c 'select 1'", image: POSTGRES },
  ],
};

/** A task the report says ran from `from`s to `to`s after T0, Succeeded unless `outcome` says otherwise. */
export const ran = (
  name: string,
  from: number,
  to: number,
  outcome: Partial<TaskOutcome> = {},
): TaskOutcome => ({
  name,
  phase: "Succeeded",
  attempts: 1,
  exitCode: 0,
  signal: null,
  startTime: at(from),
  completionTime: at(to),
  ...outcome,
});
export const SUCCEEDED: Pick<RunOutcome, "phase" | "reason" | "tasks"> = {
  phase: "Succeeded",
  reason: "Succeeded",
  tasks: [ran("build", 2, 5), ran("test", 5, 9)],
};

/** A task container's state: ran 1s..10s and exited 0. */
export const RAN_TASK = {
  terminated: {
    exitCode: 0,
    reason: "Completed",
    startedAt: at(1).toISOString(),
    finishedAt: at(10).toISOString(),
  },
};

/** The reconcile input of TWO_IMAGE_SPEC, postgres allowed, at T0 with no pods unless `partial` says. */
export function twoImageInput(partial: Partial<ReconcileInput>): ReconcileInput {
  const settings = { ...SETTINGS, allowedImages: [POSTGRES] };
  return { playbook: playbook(TWO_IMAGE_SPEC), pods: [], now: T0, settings, ...partial };
}
/** The status recorded after TWO_IMAGE_SPEC's first decision: its run started. */
export const twoImageStarted = (): PlaybookStatus => recordedStatus(decide(twoImageInput({})));

/** The cluster's own rules where a namespace policy governs: the runner image, nothing else allowed. */
export const CLUSTER = { runnerImage: "runner:test", allowedServiceAccounts: [], allowedImages: [] };
/** The rules of a namespace policy named default (generation 1) with `spec`, over CLUSTER. */
export const governed = (spec: PolicySpec | Record<string, unknown>) =>
  policyRules({ name: "default", generation: 1, spec: PolicySpecSchema.parse(spec) }, CLUSTER);

/** The Succeeded condition of `status`, if it has one. */
export const succeeded = (status: PlaybookStatus | null | undefined) =>
  status?.conditions?.find((c) => c.type === "Succeeded");

/** The pod of the createPod action among `actions`; throws when there is none. */
export function createdPod(actions: Action[]) {
  const action = actions.find((a) => a.type === "createPod");
  if (action?.type !== "createPod") throw new Error("no pod created");
  return action.pod;
}
