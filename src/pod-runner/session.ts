// The core both entries share (local-entry.ts, pod-entry.ts): run the tasks with progress, turn
// SIGINT/SIGTERM/SIGHUP into a cancellation that still reports, and encode and write the report.

import { writeFileSync } from "node:fs";
import type { ResolvedLimits } from "../api/limits.js";
import type { TaskSpec } from "../api/playbook.js";
import { decodeReport, encodeReport, type RunnerReport, type RunOutcome } from "../api/report.js";
import { expandReport } from "../api/report-expand.js";
import {
  AGENT_HELLO_VAR,
  DEFAULT_AGENT_HELLO_MS,
  DEFAULT_RUN_DIR,
  openAgentRun,
  RUN_DIR_VAR,
  taskContainersFrom,
  taskUidsFrom,
} from "./agent-mode.js";
import { decideInterrupt } from "./interrupts.js";
import { containerLimits, describePlacement, type LocalImages } from "./local-images.js";
import { type LocalRun, localRunId } from "./local-run.js";
import { countingSink, sameTarget } from "./output-sink.js";
import { PodLog } from "./pod-log.js";
import { ProgressRecorder } from "./progress-recorder.js";
import type { DrawProgress, ProgressSink } from "./progress-sink.js";
import { runPlaybook } from "./run.js";
import { maskDirsOf } from "./secret-mask.js";
import { TaskLines } from "./task-lines.js";

export interface SessionOptions {
  name: string;
  tasks: readonly TaskSpec[];
  /** spec.shell: the shell of tasks that name none */
  shell?: string | undefined;
  /** spec.finally: cleanup after the main tasks, however they ended */
  finally?: readonly TaskSpec[];
  limits: ResolvedLimits;
  runStart?: Date;
  /** What is left of the ceiling now, when known as a duration (a pod's runner): wins over runStart. */
  ceilingLeftMs?: number;
  /** where task output goes */
  output: NodeJS.WritableStream;
  progressOut: NodeJS.WritableStream;
  tty: boolean;
  /** who draws the progress (the CLI's live lines) */
  draw: DrawProgress;
  reportPath?: string | undefined;
  /** spec.cancel: the run is cancelled before its first task, as the controller cancels it before its pod */
  cancelled?: boolean | undefined;
  /** `playbook run`: how the tasks that name an image run (local-images.ts) */
  images?: LocalImages;
  /** spec.resources: its limits apply to each local task container */
  resources?: { limits?: Record<string, string | number> };
  /**
   * The pod runner: when $PLAYBOOK_TASK_CONTAINERS is set, tasks run in their containers through
   * the agents (src/pod-runner/agent-mode.ts).
   */
  agentMode?: boolean;
  /** the environment that names the task containers, the run dir and the agents' users (default: this process's) */
  env?: NodeJS.ProcessEnv;
  /** per task (by index, the finally tasks after the main ones), the container the controller resolved for it (the plan's `tasks` and `finally`) */
  taskContainers?: readonly string[];
  /**
   * The pod runner: everything (progress lines, progress records, task output) goes to `output`
   * through one ordered writer, the pod's log (src/pod-runner/pod-log.ts); `progressOut` is not used.
   */
  podLog?: boolean;
  /** secret values printed as `***` in the tasks' output (runPlaybook's maskValues) */
  maskValues?: readonly string[];
}

export interface SessionResult {
  outcome: RunOutcome;
  report: RunnerReport;
  reportText: string;
  interrupted: boolean;
}

/** A report that cannot be written must not cost the run its outcome: say so and go on. */
function writeReport(path: string, text: string, say: (line: string) => void): void {
  try {
    writeFileSync(path, text);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    say(`playbook: could not write the report to ${path}: ${code}`);
  }
}

export async function runSession(options: SessionOptions): Promise<SessionResult> {
  // The report's start: a record's offsets count from it too.
  const runStart = options.runStart ?? new Date();
  const recorder = options.podLog ? new ProgressRecorder(options.tasks.length, runStart) : undefined;
  const podLog = recorder
    ? new PodLog({
        target: options.output,
        tasks: recorder.snapshot(),
        record: (tasks) => recorder.line(tasks),
      })
    : undefined;
  const progressOut = podLog?.lines ?? options.progressOut;
  // Progress is best effort: a closed reader (EPIPE) must not crash the runner and orphan the
  // tasks' process groups. The listener stays for the life of the process.
  progressOut.on("error", () => {});
  let progress: ProgressSink | undefined;
  const taskLines = new TaskLines((options.output as { isTTY?: boolean }).isTTY === true);
  const { sink, bytes } = podLog
    ? { sink: podLog.sink, bytes: () => podLog.outputBytes() }
    : countingSink(options.output, taskLines, {
        before: () => progress?.beforeOutput(),
        after: (chunk) => progress?.afterOutput(chunk),
      });
  const sharesLines = !podLog && sameTarget(options.output, progressOut);
  progress = options.draw({
    out: progressOut,
    ...(sharesLines
      ? {
          beforeLine: () => {
            const newline = taskLines.ownLine();
            if (newline) options.output.write(newline);
          },
        }
      : {}),
    tty: options.tty,
    limits: options.limits,
    outputBytes: bytes,
    outputOnTerminal:
      options.output === progressOut || (options.output as { isTTY?: boolean }).isTTY === true,
    where: describePlacement(options.images),
    startsContainers: options.images?.mode === "containers",
  });
  // Each signal acts on what runs at that moment (interrupts.ts): the main tasks' cancel and
  // grace, then the finally tasks' own.
  const cancel = new AbortController();
  const hurry = new AbortController();
  const finallyCancel = new AbortController();
  const finallyHurry = new AbortController();
  const hasFinally = (options.finally?.length ?? 0) > 0;
  let finallyBegan = false;
  let finallyTask: string | undefined;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    const decision = decideInterrupt(
      {
        phase: finallyBegan ? "finally" : "main",
        hasFinally,
        cancelled: cancel.signal.aborted,
        hurried: hurry.signal.aborted,
        finallyCancelled: finallyCancel.signal.aborted,
        finallyHurried: finallyHurry.signal.aborted,
        finallyTask,
        again: interrupted,
      },
      signal,
    );
    progress?.say(decision.message);
    interrupted = true;
    if (decision.action === "cancel") cancel.abort();
    if (decision.action === "hurry") hurry.abort();
    if (decision.action === "cancel-finally") {
      cancel.abort();
      finallyCancel.abort();
    }
    if (decision.action === "hurry-finally") finallyHurry.abort();
  };
  // SIGHUP too: a closed terminal would otherwise kill the runner, and the tasks, which live in
  // sessions of their own and never see the hangup, would be left running.
  const signals = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
  for (const signal of signals) process.on(signal, onSignal);
  if (options.cancelled) {
    progress.say("playbook: spec.cancel is true; the run is cancelled before its first task");
    cancel.abort();
  }
  const env = options.env ?? process.env;
  const containers = options.agentMode ? taskContainersFrom(env) : null;
  let agentRun: Awaited<ReturnType<typeof openAgentRun>> | null = null;
  let local: LocalRun | undefined;
  try {
    progress.begin(options.name, options.tasks.length, runStart);
    if (recorder) podLog?.requestRecord(recorder.snapshot());
    if (containers) {
      const runDir = env[RUN_DIR_VAR] || DEFAULT_RUN_DIR;
      const helloMs = Number(env[AGENT_HELLO_VAR]) || DEFAULT_AGENT_HELLO_MS;
      const uids = taskUidsFrom(env, containers) ?? undefined;
      agentRun = await openAgentRun(containers, runDir, helloMs, options.taskContainers, uids);
      if (agentRun.problem) progress.say(`playbook: ${agentRun.problem}; nothing is run`);
    }
    // The finally tasks count on after the main ones, in the images' lists as in the runner's.
    const allTasks = [...options.tasks, ...(options.finally ?? [])];
    if (options.images?.mode === "host") {
      const named = allTasks.filter((_, index) => options.images?.images[index] !== undefined);
      progress.say(
        `playbook: --on-host: ${named.map((task) => task.name).join(", ")} run${named.length === 1 ? "s" : ""} on this machine, not in ${named.length === 1 ? "its image" : "their images"}`,
      );
    }
    const images = options.images;
    if (images?.mode === "containers" && !cancel.signal.aborted) {
      // The agent hub and the engine's client only for a run with task containers.
      const { startLocalRun } = await import("../pod-runner/local-run.js");
      try {
        local = await startLocalRun({
          engine: images.engine,
          agent: images.agent,
          containers: images.containers,
          runId: localRunId(),
          startTimeoutMs: options.limits.startTimeout.ms,
          limits: containerLimits(options.resources),
          cancelSignal: cancel.signal,
          tasksOf: (container) =>
            allTasks.filter((_, index) => images.containerOf[index] === container).map((task) => task.name),
          say: (line) => progress?.say(line),
        });
      } catch (error) {
        // Ctrl-C while they started: they are gone already, and the run is Cancelled before its
        // first task, reported as any cancelled run is.
        if (!cancel.signal.aborted) throw error;
      }
    }
    const outcome = await runPlaybook({
      ...(local && images?.mode === "containers" ? local.runOptions(images.containerOf) : {}),
      tasks: options.tasks,
      shell: options.shell,
      ...(options.finally?.length
        ? {
            finally: options.finally,
            finallyCancelSignal: finallyCancel.signal,
            finallyHurrySignal: finallyHurry.signal,
          }
        : {}),
      limits: options.limits,
      runStart,
      ...(options.ceilingLeftMs !== undefined ? { ceilingLeftMs: options.ceilingLeftMs } : {}),
      sink,
      recycleOutput: true,
      cancelSignal: cancel.signal,
      hurrySignal: hurry.signal,
      onEvent: (event) => {
        if (event.type === "finally-started") finallyBegan = true;
        if (event.type === "task-started" && event.index >= options.tasks.length) finallyTask = event.name;
        if (event.type === "task-finished" && event.index >= options.tasks.length) finallyTask = undefined;
        progress.event(event);
        if (recorder?.event(event)) podLog?.requestRecord(recorder.snapshot());
      },
      ...(agentRun ? { agents: agentRun.run } : {}),
      ...(options.maskValues ? { maskValues: options.maskValues } : {}),
      maskDirs: maskDirsOf(env),
    });
    if (options.images?.mode === "host") {
      const { images } = options.images;
      for (const [index, task] of [...outcome.tasks, ...(outcome.finally ?? [])].entries()) {
        if (images[index] !== undefined && task.phase !== "Skipped" && task.phase !== "Pending")
          task.onHost = true;
      }
    }
    const reportText = encodeReport(outcome);
    if (options.reportPath) writeReport(options.reportPath, reportText, (line) => progress?.say(line));
    const report = decodeReport(reportText, options.tasks.length, options.finally?.length ?? 0);
    progress.end(outcome, expandReport(report, options.limits).message);
    // What the sink still holds goes out before the result: the command may then end the process
    // at once (main.ts), which would drop it.
    podLog?.close();
    if (podLog) await podLog.flushed();
    while (sink.writableLength > 0) await new Promise((resolve) => setTimeout(resolve, 1));
    return { outcome, report, reportText, interrupted };
  } finally {
    // Whatever ended the run (a limit, Ctrl-C, an engine's error): no container is left.
    await local?.close();
    await agentRun?.hub.close();
    podLog?.close();
    for (const signal of signals) process.off(signal, onSignal);
  }
}
