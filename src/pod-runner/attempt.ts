// One attempt of one task: `sh -c <run>` as the leader of a new process group, watched by a
// deadline and a stall timer. Whoever fires a limit records the outcome before any signal is
// sent, so an attempt that traps SIGTERM and exits 0 is still a timeout. Where the shell runs and
// how its tree is ended is the launcher's (launcher.ts: here, or through a container's agent).
import { performance } from "node:perf_hooks";
import type { Readable, Writable } from "node:stream";
import { formatDuration } from "../api/duration.js";
import type { Ending, TaskLimit } from "../api/reasons.js";
import type { TaskShell } from "../api/shell.js";
import { writeCancelFile } from "./cancel-file.js";
import { type Launcher, LOCAL_LAUNCHER, type TermSent, within } from "./launcher.js";
import { LinePrefixer, type OutputStream, TaskOutputTails } from "./output.js";
import type { ProcessTable } from "./process-table.js";
import type { SecretMask, StreamMask } from "./secret-mask.js";
import { freeChunk, SpentChunks } from "./spent-chunks.js";
import type { TaskUsage } from "./task-usage.js";

export interface AttemptDeadline {
  /** performance.now() value at which the limit fires */
  at: number;
  limit: Exclude<TaskLimit, "StallLimit">;
}

export interface AttemptSpec {
  taskName: string;
  run: string;
  /** the task's shell (spec.tasks[].shell, else spec.shell); absent: `sh`, the default */
  shell?: TaskShell;
  /** how the task's shell is started (default `SHELL -c <run>`): the run's containment wraps it */
  command?: (run: string, shell: readonly string[]) => { file: string; args: string[] };
  env: NodeJS.ProcessEnv;
  cwd?: string;
  attemptId: string;
  /** PLAYBOOK_ATTEMPT_ID prefix shared by every attempt of the run */
  runCookie: string;
  /** start (clock ticks) of the run's first process, for finding what earlier tasks left */
  runStartedFrom?: number;
  /** where the cancel file of an attempt of this run goes (this one's, and earlier ones' leftovers) */
  cancelFileOf: (attemptId: string) => string;
  deadline: AttemptDeadline | null;
  /** 0 disables the stall limit */
  stallMs: number;
  killGraceMs: number;
  /**
   * How long the attempt waits for its pipes to close once the leader is gone before it is
   * settled. Pipes still open then are read on while the run goes on (see `pipes` in the result).
   */
  drainWindowMs: number;
  sink: Writable;
  /** the sink is done with a chunk once it has called back: output buffers are reused */
  recycleOutput?: boolean;
  prefix: string;
  tailBytes: number;
  /** the run's secret values: output and tail show each as `***` (secret-mask.ts) */
  mask?: SecretMask;
  cancelSignal?: AbortSignal;
  /** aborted to cut a running grace window short (a second Ctrl-C) */
  hurrySignal?: AbortSignal;
  /**
   * told once when a limit fires or cancellation starts: after the cancel files and the SIGTERM to
   * the group, before what else the stop signals and the grace (with killGrace 0, after the SIGKILL)
   */
  onStop?: (stop: AttemptStop) => void;
  /** where the attempt's processes are looked for (default: this machine's /proc) */
  processTable?: ProcessTable;
  /** where the shell is started (default: here, LOCAL_LAUNCHER) */
  launcher?: Launcher;
}

export interface AttemptStop {
  kind: "limit" | "cancelled";
  limit?: TaskLimit;
  warning?: string;
  /** whether the attempt's own cancel file was written (`warning` says why not) */
  cancelFileWritten?: boolean;
  /** what became of the SIGTERM to its process group (absent with killGrace 0: no SIGTERM) */
  term?: TermSent;
}

export interface AttemptResult {
  kind: "exited" | "limit" | "cancelled" | "spawn-error" | "lost";
  limit?: TaskLimit;
  ending?: Ending;
  /** the kill did not end the attempt's processes: what was left and why */
  unended?: string;
  /** a final look after the kill found nothing of the whole run alive */
  runClean?: boolean;
  /**
   * performance.now() when the grace given with the stop ends: what earlier tasks left running
   * was signalled with this attempt and has until then, not a grace of its own.
   */
  graceEndsAt?: number;
  /** ms of killGrace the group had when a second Ctrl-C (hurrySignal) cut the grace short */
  graceCutAfterMs?: number;
  exitCode: number | null;
  signal: string | null;
  startTime: Date;
  completionTime: Date;
  /** the last bytes of its stdout and stderr, apart, for a failure message */
  tail: TaskOutputTails;
  pgid: number | null;
  /** the leader's start in clock ticks (0 if it never started) */
  startedFrom: number;
  spawnError?: string;
  /** kind "exited": why the leader could not become the task's shell (its agent's chdir or exec failed) */
  execFailure?: string;
  /** kind "lost": the task's container, whose agent went away while the attempt ran */
  lostContainer?: string;
  /** set by the run when the kernel's OOM killer ended a process during the attempt: what it saw */
  outOfMemory?: string;
  /** the pipes when still open at settlement, held by a background process: drain them with drainPipes */
  pipes: OpenPipes | null;
  /** what the attempt cost, where its launcher measured it */
  usage?: TaskUsage;
  /**
   * The longest time in ms with no output (stdout or stderr), from the start to the leader's end
   * or the stop: what a stall limit has to allow. Time the task spent blocked on our slow reader
   * is not silence. Absent when the attempt never started.
   */
  longestSilenceMs?: number;
  /**
   * Bytes of its output dropped so far because the runner's stdout was behind once the pipes
   * could no longer be held (agent-launcher.ts): counted on while open pipes are read.
   */
  droppedBytes?: () => number;
}

/** An attempt's output pipes, still being read after the attempt was settled. */
export interface OpenPipes {
  closed: Promise<void>;
  /** performance.now() when a byte last came out of them or the sink last took what they gave */
  lastProgress: () => number;
  /** paused because the sink is full: the holder is waiting on us, not silent */
  blocked: () => boolean;
  /** stops reading: what still holds them can write no more */
  abandon: () => void;
}

/** The longest delay setTimeout keeps (about 24.8 days); beyond it, it fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** How much earlier than the deadline its timer is set, the rest waited turn by turn of the loop. */
const DEADLINE_EARLY_MS = 4;
/**
 * After the run's final kill every holder of a pipe that the kill can find is dead, so what a pipe
 * still gives is what was queued in it. One that gives nothing for this long (while not waiting on
 * the sink) is held by a process the kill could not find: it is given up.
 */
const PIPE_QUIET_MS = 500;
/**
 * And a pipe is waited on for at most this long after the final kill, however much it still
 * gives (a hidden holder that keeps writing). Time spent waiting for the sink to take what the
 * pipe gave is not counted: the runner's own reader is slow then, not the task.
 */
const PIPE_DRAIN_MAX_MS = 2000;
/** How often the drain looks again at a pipe that is waiting on the sink. */
const PIPE_DRAIN_LOOK_MS = 100;

/**
 * Streams a task's pipe into the sink with line prefixes, pausing the pipe while the sink is
 * full so memory stays bounded however much the task prints. Resolves when the pipe ends.
 */
function forward(
  stream: Readable,
  sink: Writable,
  prefix: string,
  recycle: boolean,
  spent: SpentChunks | null,
  mask: StreamMask | null,
  onData: (chunk: Buffer) => void,
  onKept: (chunk: Buffer) => void,
  onBlocked: (blocked: boolean) => void,
): Promise<void> {
  const prefixer = new LinePrefixer(prefix, recycle);
  let blocked = false;
  const resume = () => {
    blocked = false;
    onBlocked(false);
    stream.resume();
  };
  /** the stream's bytes, masked: to the tail and the sink */
  const pass = (chunk: Buffer) => {
    if (chunk.length === 0) return;
    onKept(chunk);
    const out = prefixer.push(chunk);
    // The sink holds the chunk itself when it was passed on as it is (a line going on, no prefix):
    // it is freed after the sink called back, and only with a sink that is done with it then.
    const asItIs = out === chunk;
    if (spent !== null && (!asItIs || recycle)) spent.passed(chunk, asItIs);
    const accepted = recycle
      ? sink.write(out, (error) => {
          if (asItIs) spent?.release(chunk);
          else if (!error) prefixer.release(out);
        })
      : sink.write(out);
    if (!accepted) {
      stream.pause();
      // Node resumes a child's paused pipes once when the child exits, so data can come while
      // we are already waiting for "drain": wait for it once, or the blocked count goes wrong.
      if (!blocked) {
        blocked = true;
        onBlocked(true);
        sink.once("drain", resume);
      }
    }
  };
  stream.on("data", (chunk: Buffer) => {
    // Every byte resets the stall clock, also one the mask holds back for now.
    onData(chunk);
    if (mask === null) {
      pass(chunk);
      return;
    }
    const masked = mask.push(chunk);
    // A masked copy of its own was made: nothing holds the pipe's chunk any more.
    if (spent !== null && masked.buffer !== chunk.buffer) freeChunk(chunk);
    pass(masked);
  });
  return new Promise((resolve) => {
    let ended = false;
    const done = () => {
      if (ended) return;
      ended = true;
      if (mask !== null) pass(mask.end());
      const tail = prefixer.end();
      if (tail) sink.write(tail);
      sink.off("drain", resume);
      if (blocked) onBlocked(false);
      resolve();
    };
    stream.once("end", done);
    stream.once("error", done);
    // Abandoned (destroyed) after the run: no "end" comes.
    stream.once("close", done);
  });
}

export async function runAttempt(spec: AttemptSpec): Promise<AttemptResult> {
  const spent = new SpentChunks();
  const tail = new TaskOutputTails(spec.tailBytes, (chunk) => spent.release(chunk));
  const startTime = new Date();
  const started = await (spec.launcher ?? LOCAL_LAUNCHER).launch(spec);
  if ("error" in started) {
    const failed = spawnFailure(started.error, startTime, tail);
    return started.lostContainer ? { ...failed, kind: "lost", lostContainer: started.lostContainer } : failed;
  }
  const task = started.launched;
  const pgid = task.pgid;

  let lastOutput = performance.now();
  let blockedPipes = 0;
  // Kept per chunk, not per byte: one subtraction where lastOutput is already read.
  let longestSilence = 0;
  const onData = () => {
    const now = performance.now();
    if (blockedPipes === 0) longestSilence = Math.max(longestSilence, now - lastOutput);
    lastOutput = now;
  };
  // While a pipe is paused because our reader is slow, the task is blocked on us, not silent:
  // that time is not a stall.
  const onBlocked = (blocked: boolean) => {
    blockedPipes += blocked ? 1 : -1;
    lastOutput = performance.now();
  };
  const streamsClosed = Promise.all(
    task.streams.map((stream, index) => {
      const name: OutputStream = index === 1 ? "stderr" : "stdout";
      return forward(
        stream,
        spec.sink,
        spec.prefix,
        spec.recycleOutput === true,
        task.chunksOwned ? spent : null,
        spec.mask?.active ? spec.mask.stream() : null,
        onData,
        (chunk) => tail.push(name, chunk),
        onBlocked,
      );
    }),
  ).then(() => undefined);

  const { leaderExited } = task;
  let lost: string | null = null;
  const containerLost = task.lost?.then((container) => {
    lost = container;
  });

  // The watchdog: one timer for the deadline, one for the stall window. Both are stopped the
  // moment the leader exits on its own or a limit fires.
  let stop: AttemptStop | null = null;
  let stopFired!: () => void;
  const stopped = new Promise<void>((resolve) => {
    stopFired = resolve;
  });
  let deadlineTimer: NodeJS.Timeout | undefined;
  let deadlineTurn: NodeJS.Immediate | undefined;
  let stallTimer: NodeJS.Timeout | undefined;
  const stopWatchdog = () => {
    clearTimeout(deadlineTimer);
    clearImmediate(deadlineTurn);
    clearTimeout(stallTimer);
    spec.cancelSignal?.removeEventListener("abort", onCancel);
  };
  let announced: Promise<void> = Promise.resolve();
  const fire = (next: AttemptStop) => {
    if (stop || !task.leaderAlive() || lost !== null) return;
    stop = next;
    stopWatchdog();
    announced = announceStop(next);
  };
  /**
   * The cancel files, then the listener; `stopped` resolves after both, and the signals follow.
   * With no grace the SIGKILL comes first: no task can read its cancel file before it, and the
   * kill waits for neither (the file and the announcement follow on the loop's next turn).
   */
  const announceStop = async (next: AttemptStop) => {
    if (spec.killGraceMs === 0) {
      stopFired();
      await new Promise((resolve) => setImmediate(resolve));
    }
    const message =
      next.kind === "cancelled"
        ? "cancelled"
        : `${next.limit}: ${spec.taskName} passed its limit, stop now (grace ${formatDuration(spec.killGraceMs)})`;
    const stopMessage = `${message}\n`;
    const ownFile = spec.cancelFileOf(spec.attemptId);
    const written = writeCancelFile(ownFile, stopMessage);
    next.cancelFileWritten = written.written;
    const warnings = written.written ? [] : [`cancel file ${ownFile}: ${written.reason}`];
    // A stop ends the run: what earlier tasks left running gets its own cancel file now too, before
    // the SIGTERM it shares with this task. Not with no grace: the SIGKILL comes at once.
    if (spec.killGraceMs > 0) warnings.push(...(await task.warnLeftovers(spec.runCookie, stopMessage)));
    if (warnings.length > 0) next.warning = warnings.join("; ");
    // With a grace the listener is told once the SIGTERM was sent, and what became of it.
    if (spec.killGraceMs === 0) tell(next);
    stopFired();
  };
  const onCancel = () => fire({ kind: "cancelled" });
  let told = false;
  const tell = (what: AttemptStop) => {
    if (told) return;
    told = true;
    spec.onStop?.(what);
  };

  if (spec.deadline) {
    const deadline = spec.deadline;
    // A timer wakes late: its delay is kept in whole ms and the loop looks at it once a turn (up to
    // 3.5 ms late on a busy node, traced in bench:images). It is set to wake DEADLINE_EARLY_MS
    // early, and the rest is waited turn by turn of the loop: the limit fires neither before its
    // deadline nor a timer's slack after it. A longer wait than a timer holds is taken in steps.
    const onDeadline = () => {
      const wait = deadline.at - performance.now();
      if (wait > 0) return armDeadline(wait);
      fire({ kind: "limit", limit: deadline.limit });
    };
    const armDeadline = (wait: number) => {
      if (wait > DEADLINE_EARLY_MS)
        deadlineTimer = setTimeout(onDeadline, Math.min(wait - DEADLINE_EARLY_MS, MAX_TIMER_MS));
      else deadlineTurn = setImmediate(onDeadline);
    };
    armDeadline(deadline.at - performance.now());
  }
  if (spec.stallMs > 0) {
    // Re-armed from the last output time rather than on every chunk: cheap at 1 GiB of output.
    const armStall = (delay: number) => {
      stallTimer = setTimeout(
        () => {
          const quiet = performance.now() - lastOutput;
          if (blockedPipes > 0) armStall(spec.stallMs);
          else if (quiet >= spec.stallMs - 1) fire({ kind: "limit", limit: "StallLimit" });
          else armStall(spec.stallMs - quiet);
        },
        Math.min(delay, MAX_TIMER_MS),
      );
    };
    armStall(spec.stallMs);
  }
  if (spec.cancelSignal?.aborted) onCancel();
  else spec.cancelSignal?.addEventListener("abort", onCancel, { once: true });

  await Promise.race([leaderExited, stopped, ...(containerLost ? [containerLost] : [])]);
  // The silence that ends the attempt counts up to the leader's end or the stop, not the grace.
  const longestSilenceMs =
    blockedPipes > 0 ? longestSilence : Math.max(longestSilence, performance.now() - lastOutput);

  // Stopped by a limit or cancellation: end the tree. Otherwise the leader is done and the
  // attempt is over; a background process that still holds the pipes (a service for later
  // tasks) is not waited for beyond the drain window. Its output is read on while the run goes
  // on and drained after the run's final kill (drainPipes), so none of it is dropped.
  const fired = stop as AttemptStop | null;
  let ended: {
    ending?: Ending;
    unended?: string;
    runClean?: boolean;
    graceEndsAt?: number;
    graceCutAfterMs?: number;
  } = {};
  if (fired) {
    // The leader may have exited while the stop was announced: the announcement still comes first.
    await stopped;
    ended = await task.endTree(spec.killGraceMs, spec.runCookie, spec.hurrySignal, (term) =>
      tell({ ...fired, term }),
    );
    // With no grace the kill went first: the cancel file, the listener and a warning of the
    // announcement are done before the attempt's result is.
    await announced;
    tell(fired);
  } else stopWatchdog();
  // The task's container went away under it: nothing is left to signal or to wait for there.
  const lostContainer = fired ? null : (lost as string | null);
  const pipesClosed = lostContainer === null && (await within(streamsClosed, spec.drainWindowMs));
  const pipes: OpenPipes = {
    closed: streamsClosed,
    lastProgress: () => lastOutput,
    blocked: () => blockedPipes > 0,
    abandon: () => {
      for (const stream of task.streams) stream.destroy();
    },
  };
  // A leader the kill could not reach (it became another user) must not keep the runner alive.
  task.release();
  const { code: exitCode, signal: exitSignal } = task.exit();
  const usage = task.usage?.();
  const execFailure = task.execFailure?.();
  return {
    kind: fired ? fired.kind : lostContainer !== null ? "lost" : "exited",
    limit: fired?.limit,
    ...ended,
    ...(lostContainer !== null ? { lostContainer } : {}),
    exitCode,
    signal: exitSignal,
    startTime,
    completionTime: new Date(),
    tail,
    pgid,
    startedFrom: task.startedFrom,
    pipes: pipesClosed || lostContainer !== null ? null : pipes,
    ...(usage ? { usage } : {}),
    longestSilenceMs,
    ...(execFailure !== undefined ? { execFailure } : {}),
    ...(task.droppedBytes ? { droppedBytes: task.droppedBytes } : {}),
  };
}

/**
 * Reads what is left in the pipes of a run's attempts, once the run's final kill is done: until
 * each closes, or is given up as held by a process the kill could not find (nothing for
 * PIPE_QUIET_MS while not waiting on the sink, or PIPE_DRAIN_MAX_MS of waiting on it in all).
 * A second Ctrl-C (`hurry`) gives them all up at once. Pipes given up are closed.
 */
export async function drainPipes(open: readonly OpenPipes[], hurry?: AbortSignal): Promise<void> {
  if (open.length === 0) return;
  const hurried = new Promise<void>((resolve) => {
    if (hurry?.aborted) resolve();
    else hurry?.addEventListener("abort", () => resolve(), { once: true });
  });
  const drainStart = performance.now();
  await Promise.all(
    open.map(async (pipes) => {
      let waitedOnPipe = 0;
      for (;;) {
        const blocked = pipes.blocked();
        // Quiet since the kill, not since the last output: what the kill's victims queued may be
        // read only now.
        const quiet = blocked ? 0 : performance.now() - Math.max(drainStart, pipes.lastProgress());
        if (hurry?.aborted || quiet >= PIPE_QUIET_MS || waitedOnPipe >= PIPE_DRAIN_MAX_MS) break;
        const from = performance.now();
        const wait = Math.min(PIPE_DRAIN_LOOK_MS, PIPE_QUIET_MS - quiet, PIPE_DRAIN_MAX_MS - waitedOnPipe);
        const closed = await within(Promise.race([pipes.closed, hurried]), wait);
        if (closed && !hurry?.aborted) return;
        if (!blocked || !pipes.blocked()) waitedOnPipe += performance.now() - from;
      }
      pipes.abandon();
    }),
  );
}

function spawnFailure(spawnError: string, startTime: Date, tail: TaskOutputTails): AttemptResult {
  return {
    kind: "spawn-error",
    exitCode: null,
    signal: null,
    startTime,
    completionTime: new Date(),
    tail,
    pgid: null,
    startedFrom: 0,
    spawnError,
    pipes: null,
  };
}
