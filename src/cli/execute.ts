// What `playbook run` and `playbook pod-runner` share: run the tasks with progress, turn
// SIGINT/SIGTERM/SIGHUP into a cancellation that still reports, and encode the report.
import { fstatSync, writeFileSync } from "node:fs";
import { Writable } from "node:stream";
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
} from "../pod-runner/agent-mode.js";
import type { LocalRun } from "../pod-runner/local-run.js";
import { writeThenRelease } from "../pod-runner/output.js";
import { PodLog } from "../pod-runner/pod-log.js";
import { ProgressRecorder } from "../pod-runner/progress-recorder.js";
import { runPlaybook } from "../pod-runner/run.js";
import { TaskLines } from "../pod-runner/task-lines.js";
import type { LocalImages } from "./local-images.js";
import { Progress } from "./progress.js";

export interface ExecuteOptions {
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
  reportPath?: string;
  /** spec.cancel: the run is cancelled before its first task, as the controller cancels it before its pod */
  cancelled?: boolean;
  /** `playbook run`: how the tasks that name an image run (local-images.ts) */
  images?: LocalImages;
  /** `playbook run --secret`: the values the runner prints as *** (src/pod-runner/secret-mask.ts) */
  maskValues?: readonly string[];
  /** spec.resources: its limits apply to each local task container */
  resources?: { limits?: Record<string, string | number> };
  /**
   * The pod runner: when $PLAYBOOK_TASK_CONTAINERS is set, tasks run in their containers through
   * the agents (src/pod-runner/agent-mode.ts).
   */
  agentMode?: boolean;
  /** per task (by index, the finally tasks after the main ones), the container the controller resolved for it (the plan's `tasks` and `finally`) */
  taskContainers?: readonly string[];
  /**
   * The pod runner: everything (progress lines, progress records, task output) goes to `output`
   * through one ordered writer, the pod's log (src/pod-runner/pod-log.ts); `progressOut` is not used.
   */
  podLog?: boolean;
}

export interface ExecuteResult {
  outcome: RunOutcome;
  report: RunnerReport;
  reportText: string;
  interrupted: boolean;
}

/**
 * A sink that counts what passes and survives a closed reader (EPIPE) without losing the run.
 * `lines` keeps each stream's partial line apart from the others' (task-lines.ts).
 */
function countingSink(
  target: NodeJS.WritableStream,
  lines: TaskLines,
  around: { before: () => void; after: (chunk: Buffer) => void },
): { sink: Writable; bytes: () => number } {
  let bytes = 0;
  let broken = false;
  target.on("error", () => {
    broken = true;
  });
  const sink = new Writable({
    highWaterMark: 1 << 16,
    write(chunk: Buffer, _encoding, callback) {
      bytes += chunk.length;
      if (broken) return callback();
      around.before();
      const pieces = lines.task(chunk);
      writeThenRelease(target, pieces, callback);
      // The chunk is the last piece written; none (a line's "\n" that was ended already) changes nothing.
      if (pieces.length > 0) around.after(chunk);
    },
  });
  return { sink, bytes: () => bytes };
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

/**
 * Whether two streams end in the same place: the same stream (`-o json` puts task output on
 * stderr), or the same terminal, pipe or file (`2>&1`). There the runner's lines and the tasks'
 * share lines, and a task's open line is ended before one of the runner's.
 */
function sameTarget(a: NodeJS.WritableStream, b: NodeJS.WritableStream): boolean {
  if (a === b) return true;
  const fdA = (a as { fd?: unknown }).fd;
  const fdB = (b as { fd?: unknown }).fd;
  if (typeof fdA !== "number" || typeof fdB !== "number") return false;
  try {
    const [statA, statB] = [fstatSync(fdA), fstatSync(fdB)];
    return statA.dev === statB.dev && statA.ino === statB.ino && statA.rdev === statB.rdev;
  } catch {
    return false;
  }
}

/** Where each task that names an image runs, as the progress says it. */
function describePlacement(images: LocalImages | undefined): (string | undefined)[] | undefined {
  if (!images) return undefined;
  if (images.mode === "host") {
    return images.images.map((image) => (image ? `on the host, not in ${image} (--on-host)` : undefined));
  }
  return images.images.map((image, index) =>
    image ? `in ${image} (${images.engine.kind}, container ${images.containerOf[index]})` : undefined,
  );
}

export async function executeRun(options: ExecuteOptions): Promise<ExecuteResult> {
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
  let progress: Progress | undefined;
  const taskLines = new TaskLines((options.output as { isTTY?: boolean }).isTTY === true);
  const { sink, bytes } = podLog
    ? { sink: podLog.sink, bytes: () => podLog.outputBytes() }
    : countingSink(options.output, taskLines, {
        before: () => progress?.beforeOutput(),
        after: (chunk) => progress?.afterOutput(chunk),
      });
  const sharesLines = !podLog && sameTarget(options.output, progressOut);
  progress = new Progress({
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
  const cancel = new AbortController();
  const hurry = new AbortController();
  // The finally tasks run after a cancel too: a cancel that comes once they began (or a second
  // one before) ends them, and one more kills without the grace.
  const finallyCancel = new AbortController();
  const hasFinally = (options.finally?.length ?? 0) > 0;
  let finallyBegan = false;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (hasFinally && !finallyCancel.signal.aborted && (interrupted || finallyBegan)) {
      progress?.say(
        `playbook: received ${signal}${interrupted ? " again" : ""}; cancelling the finally tasks (again to kill at once)`,
      );
      interrupted = true;
      cancel.abort();
      finallyCancel.abort();
      return;
    }
    if (interrupted) {
      progress?.say(`playbook: received ${signal} again; killing without waiting for the grace`);
      hurry.abort();
      return;
    }
    progress?.say(
      `playbook: received ${signal}; cancelling the run (${hasFinally ? "the finally tasks still run; again to cancel them too" : "again to kill at once"})`,
    );
    interrupted = true;
    cancel.abort();
  };
  // SIGHUP too: a closed terminal would otherwise kill the runner, and the tasks, which live in
  // sessions of their own and never see the hangup, would be left running.
  const signals = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
  for (const signal of signals) process.on(signal, onSignal);
  if (options.cancelled) {
    progress.say("playbook: spec.cancel is true; the run is cancelled before its first task");
    cancel.abort();
  }
  const containers = options.agentMode ? taskContainersFrom(process.env) : null;
  let agentRun: Awaited<ReturnType<typeof openAgentRun>> | null = null;
  let local: LocalRun | undefined;
  try {
    progress.begin(options.name, options.tasks.length, runStart);
    if (recorder) podLog?.requestRecord(recorder.snapshot());
    if (containers) {
      const runDir = process.env[RUN_DIR_VAR] || DEFAULT_RUN_DIR;
      const helloMs = Number(process.env[AGENT_HELLO_VAR]) || DEFAULT_AGENT_HELLO_MS;
      const uids = taskUidsFrom(process.env, containers) ?? undefined;
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
      ...(options.maskValues ? { maskValues: [...options.maskValues] } : {}),
      shell: options.shell,
      ...(options.finally?.length
        ? { finally: options.finally, finallyCancelSignal: finallyCancel.signal }
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
        progress.event(event);
        if (recorder?.event(event)) podLog?.requestRecord(recorder.snapshot());
      },
      ...(agentRun ? { agents: agentRun.run } : {}),
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

/** Names the run's containers apart from any other run's on this machine. */
function localRunId(): string {
  return `${process.pid.toString(16)}-${Math.floor(Math.random() * 2 ** 32)
    .toString(16)
    .padStart(8, "0")}`;
}

/** spec.resources.limits as the engines take them (--memory, --cpus). */
function containerLimits(resources: ExecuteOptions["resources"]): { memory?: string; cpu?: string } {
  const limits = resources?.limits ?? {};
  return {
    ...(limits.memory !== undefined ? { memory: String(limits.memory) } : {}),
    ...(limits.cpu !== undefined ? { cpu: String(limits.cpu) } : {}),
  };
}
