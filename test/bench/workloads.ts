// The objects each side runs: a Playbook, and a Job whose pod has the same shape as the pod our
// controller makes for that Playbook (the runner with the same plan), so the bench node's
// autopilot gives both the same life; and how long each task command takes there.
import { resolveLimits } from "../../src/api/limits.js";
import { type PlaybookSpec, PlaybookSpecSchema } from "../../src/api/playbook.js";
import { limitDefaults, loadControllerConfig } from "../../src/controller/config.js";
import { buildPod, type PodManifest } from "../../src/controller/pods/pod-builder.js";

export const PLAYBOOKS = "/apis/playbook.dev/v1alpha1";
export const JOBS = "/apis/batch/v1";

/**
 * What each task command of the benchmark's workloads takes on the bench node (autopilot.ts ends
 * the pod after it, or at the limit that comes first): about what the runner takes to run it.
 */
const TASK_MS: Record<string, number> = { true: 100, "echo done": 100, "sleep 60": 60_000 };

export function taskMs(run: string): number {
  const ms = TASK_MS[run];
  if (ms === undefined) throw new Error(`workloads.ts gives no task time for run ${JSON.stringify(run)}`);
  return ms;
}

export function playbook(name: string, spec: object): object {
  return { apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name }, spec };
}

/** A Job running the runner with this spec's plan; `activeDeadlineSeconds` only when given. */
export function job(
  name: string,
  namespace: string,
  specInput: object,
  activeDeadlineSeconds?: number,
): object {
  const pod = builtPod(name, namespace, specInput);
  // Neither our labels (our controller would take the pod for its own) nor our deadline.
  const { activeDeadlineSeconds: _ours, ...podSpec } = pod.spec;
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name },
    spec: {
      backoffLimit: 0,
      ...(activeDeadlineSeconds !== undefined ? { activeDeadlineSeconds } : {}),
      template: { metadata: { annotations: pod.metadata.annotations }, spec: podSpec },
    },
  };
}

/**
 * The pod our controller creates for `playbook(name, specInput)`, as it builds it, without its
 * owner reference (no Playbook stands behind it: the launch bench's bare-loop reference creates
 * it straight through the API).
 */
export function playbookPod(name: string, namespace: string, specInput: object): object {
  const pod = builtPod(name, namespace, specInput);
  const { ownerReferences: _none, ...metadata } = pod.metadata;
  return { ...pod, metadata };
}

/** The pod our controller builds for a Playbook of this spec, at the controller's defaults, started now. */
function builtPod(name: string, namespace: string, specInput: object): PodManifest {
  const spec: PlaybookSpec = PlaybookSpecSchema.parse(specInput);
  const config = loadControllerConfig({}, {});
  const defaults = limitDefaults(config);
  const now = new Date();
  return buildPod({
    playbook: { name, namespace, uid: "00000000-0000-0000-0000-000000000000" },
    spec,
    limits: resolveLimits(spec, defaults),
    defaults,
    attempt: 1,
    runStart: now,
    now,
    runnerImage: config.runnerImage,
  });
}

/** A finished run as `kubectl apply` and the controller leave it: three tasks, their times and the conditions. */
export function finishedPlaybook(name: string, index: number): { object: object; status: object } {
  const start = new Date(Date.UTC(2026, 10, 1, 0, 0, index % 3600));
  const at = (seconds: number) =>
    new Date(start.getTime() + seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z");
  const tasks = ["checkout", "build", "publish"];
  const spec = {
    ceiling: "30m",
    stall: "5m",
    tasks: tasks.map((task) => ({
      name: task,
      run: `set -eu\necho "${task} for ${name}"\n./scripts/${task}.sh --verbose --retry 3 --out /work/${task}.log`,
      timeout: "10m",
      env: [{ name: "STAGE", value: task }],
    })),
  };
  const status = {
    observedGeneration: 1,
    phase: "Succeeded",
    startTime: at(0),
    completionTime: at(95),
    podName: `${name}-1`,
    podAttempts: 1,
    limits: {
      ceiling: { value: "30m", source: "spec" },
      stall: { value: "5m", source: "spec" },
      killGrace: { value: "10s", source: "default" },
    },
    tasks: tasks.map((task, i) => ({
      name: task,
      phase: "Succeeded",
      attempts: 1,
      exitCode: 0,
      startTime: at(i * 30),
      completionTime: at(i * 30 + 29),
      limitValue: "10m",
      limitSource: "task",
    })),
    conditions: [
      {
        type: "Succeeded",
        status: "True",
        reason: "Succeeded",
        message: "every task succeeded (3 of 3)",
        lastTransitionTime: at(95),
        observedGeneration: 1,
      },
    ],
  };
  const object = playbook(name, spec) as { metadata: Record<string, unknown> };
  // As `kubectl apply` leaves it: a copy of what was applied, which no controller reads.
  object.metadata.annotations = {
    "kubectl.kubernetes.io/last-applied-configuration": `${JSON.stringify(object)}\n`,
  };
  return { object, status };
}
