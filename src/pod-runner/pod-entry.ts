// The runner's entry in a pod (`playbook pod-runner`): the plan the controller wrote and the pod's
// environment in; the report written to the termination-message file and the exit code out.
import { exitCodeForReason } from "../api/exit-codes.js";
import { resolveLimits } from "../api/limits.js";
import { validatePlaybook } from "../api/manifest.js";
import { PLAN_DIGEST_ENV_VAR, planDigest, RunPlanSchema } from "../api/plan.js";
import { teeLogUpload } from "./log-upload-tee.js";
import { handedCeilingLeftMs, podAgeMs } from "./pod-age.js";
import type { DrawProgress } from "./progress-sink.js";
import { runSession, type SessionResult } from "./session.js";

export interface PodRunInput {
  /** the plan's text, and where it came from (for messages) */
  planText: string;
  planSource: string;
  env: NodeJS.ProcessEnv;
  /** the container's terminationMessagePath */
  terminationLog: string;
  /** the pod's log: progress, progress records and task output, in one ordered stream */
  output: NodeJS.WritableStream;
  draw: DrawProgress;
}

export interface PodRunResult extends SessionResult {
  /** by the report's reason alone, interrupted or not */
  exitCode: number;
}

/** A plan this runner cannot run: nothing was run (exit 2). */
export class PlanError extends Error {}

export async function runInPod(input: PodRunInput): Promise<PodRunResult> {
  let planJson: unknown;
  try {
    planJson = JSON.parse(input.planText);
  } catch {
    throw new PlanError(`the plan is not JSON (${input.planSource})`);
  }
  const plan = RunPlanSchema.parse(planJson);
  const expected = input.env[PLAN_DIGEST_ENV_VAR];
  if (expected !== undefined && planDigest(plan) !== expected) {
    throw new PlanError(
      `the plan (${input.planSource}) hashes to ${planDigest(plan)}, not to $${PLAN_DIGEST_ENV_VAR} ${expected}: it was changed after the pod was created; nothing was run`,
    );
  }
  const playbook = validatePlaybook(
    { apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name: plan.name }, spec: plan.spec },
    plan.defaults,
    "plan",
  );
  const limits = resolveLimits(playbook.spec, plan.defaults);
  let ceilingLeftMs: number | undefined;
  try {
    ceilingLeftMs = handedCeilingLeftMs(input.env, podAgeMs());
  } catch (error) {
    throw new PlanError((error as Error).message);
  }
  // The log goes into the archive too when the controller handed the runner an upload plan.
  const log = teeLogUpload(input.output, input.env);
  const result = await runSession({
    name: plan.namespace ? `${plan.namespace}/${plan.name}` : plan.name,
    tasks: playbook.spec.tasks,
    shell: playbook.spec.shell,
    ...(playbook.spec.finally?.length ? { finally: playbook.spec.finally } : {}),
    limits,
    runStart: new Date(plan.runStartTime),
    ...(ceilingLeftMs !== undefined ? { ceilingLeftMs } : {}),
    // One stream, one ordered writer: the runner's log is what the controller reads progress from.
    output: log.output,
    progressOut: log.output,
    podLog: true,
    tty: false,
    draw: input.draw,
    reportPath: input.terminationLog,
    cancelled: playbook.spec.cancel,
    agentMode: true,
    env: input.env,
    // The finally tasks' containers count on after the main tasks', as the runner counts them.
    ...(plan.tasks
      ? { taskContainers: [...plan.tasks, ...(plan.finally ?? [])].map((task) => task.container) }
      : {}),
  });
  await log.finish();
  // The controller trusts a report only from a runner whose exit code its reason explains.
  return { ...result, exitCode: exitCodeForReason(result.report.reason) };
}
