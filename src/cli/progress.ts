// Progress on stderr: plain lines for logs and pipes; on a terminal, one line per task that is
// rewritten in place when the task ends (as long as no task output came in between), and a live
// line below the task's output with its clock against each limit, redrawn while it runs.
//
// Every line goes out through `write`, which shows each control character in it as an escape
// (src/api/visible-text.ts): the text comes from the spec, the image, the environment and the
// tasks (a workingDir, a PATH, an error, a task's last line), and a newline in it would start a
// line that is not the runner's. On a terminal the only control sequences are the styles and
// cursor moves this file writes itself (`Styled`).
import { formatDuration } from "../api/duration.js";
import type { EffectiveLimit, TaskLimits } from "../api/limits.js";
import type { RunOutcome } from "../api/report.js";
import { escapeControls } from "../api/visible-text.js";
import type { AttemptStop } from "../pod-runner/attempt.js";
import type { ProgressView } from "../pod-runner/progress-sink.js";
import { showWait } from "../pod-runner/retry-wait.js";
import type { RunEvent } from "../pod-runner/run.js";

export function showLimit(limit: EffectiveLimit): string {
  return `${formatDuration(limit.ms)} (${limit.source})`;
}

/**
 * The start timeout bounds a cluster pod's wait to start; a local run has no pod to wait for, but
 * bounds the start of its task containers (a pull included) with it.
 */
export function showStartTimeout(limit: EffectiveLimit, containers = false): string {
  const where = containers ? "the task containers' start" : "on a cluster only";
  return `startTimeout ${formatDuration(limit.ms)} (${limit.source}; ${where})`;
}

/**
 * "timeout 10m (task), stall 2m (spec), ceiling 30m (spec)"; a finally task's bound is the finally
 * ceiling: "..., finallyCeiling 5m (default)".
 */
export function describeTaskLimits(
  task: TaskLimits,
  bound: { ceiling: EffectiveLimit } | { finallyCeiling: EffectiveLimit },
): string {
  const timeout = task.timeout ? `timeout ${showLimit(task.timeout)}` : "no timeout of its own";
  const stall = task.stall.ms === 0 ? `stall off (${task.stall.source})` : `stall ${showLimit(task.stall)}`;
  const ceiling =
    "finallyCeiling" in bound
      ? `finallyCeiling ${showLimit(bound.finallyCeiling)}`
      : `ceiling ${showLimit(bound.ceiling)}`;
  return `${timeout}, ${stall}, ${ceiling}`;
}

const MIB = 1024 * 1024;

/** A task's cost as its finished line shows it: `cpu 1.02s`, `peak 201 MiB` (progress-lines.ts reads them back). */
export function describeUsage(usage: { cpuSeconds?: number; peakMemoryBytes?: number }): string[] {
  const parts: string[] = [];
  if (usage.cpuSeconds !== undefined) parts.push(`cpu ${usage.cpuSeconds.toFixed(2)}s`);
  const bytes = usage.peakMemoryBytes;
  if (bytes !== undefined) {
    if (bytes < MIB) parts.push(`peak ${Math.round(bytes / 1024)} KiB`);
    else if (bytes < 1024 * MIB) parts.push(`peak ${Math.round(bytes / MIB)} MiB`);
    else parts.push(`peak ${(bytes / (1024 * MIB)).toFixed(1)} GiB`);
  }
  return parts;
}

/**
 * A stop with a grace, as done: the cancel file written or not (a warning line says why), and
 * what became of the SIGTERM (`term`: absent from an event read back from an older runner's line).
 */
function describeStop(stop: AttemptStop, killGraceMs: number): string {
  const file = stop.cancelFileWritten === false ? "cancel file not written" : "cancel file written";
  const term = stop.term?.detail ?? "SIGTERM sent to its process group";
  return `${file}, ${term}, SIGKILL in ${formatDuration(killGraceMs)}`;
}

/** The sweep's line: what it found, and how many of those it saw end (progress-lines.ts reads it back). */
export function describeSweep(found: number, ended: number): string {
  return ended === found
    ? `playbook: ended ${found} process(es) that tasks left running`
    : `playbook: found ${found} process(es) that tasks left running and ended ${ended}: ${found - ended} still ran after the kill`;
}

/** Output dropped rather than kept while the runner's stdout was behind. */
export function describeDrop(name: string, bytes: number, when: "stop" | "end"): string {
  const phase = when === "stop" ? "after its stop" : "at the run's end";
  return `playbook: task ${name}: dropped ${bytes} bytes of its output that came ${phase} faster than the runner's stdout took it`;
}

/** How often the live line is redrawn: twice a second, so no whole second is ever skipped. */
const LIVE_REDRAW_MS = 500;
/** After task output, the live line comes back at most this often, so long output is not slowed. */
const LIVE_AFTER_OUTPUT_MS = 100;

interface RunningAttempt {
  name: string;
  startedAt: number;
  limits: TaskLimits;
  lastOutputAt: number;
}

function wholeSeconds(ms: number, round: (x: number) => number): string {
  return formatDuration(Math.max(0, round(ms / 1000)) * 1000);
}

/** A piece of a line on a terminal: text, or text in an SGR style (`["2", text]`: dim). */
type Piece = string | readonly [sgr: string, text: string];

/** A terminal line from its pieces: each text escaped, the styles around it the only control bytes. */
function styled(pieces: readonly Piece[]): Styled {
  const text = pieces
    .map((piece) =>
      typeof piece === "string"
        ? escapeControls(piece)
        : `\x1b[${piece[0]}m${escapeControls(piece[1])}\x1b[0m`,
    )
    .join("");
  return { styled: text };
}

/** A line whose control bytes are the styles `styled` put there, and no others. */
interface Styled {
  readonly styled: string;
}

const SYMBOLS: Record<string, readonly [string, string]> = {
  Succeeded: ["32", "✓"],
  Failed: ["31", "✗"],
  TimedOut: ["31", "⏱"],
  Cancelled: ["33", "■"],
  Skipped: ["2", "-"],
};

export class Progress {
  private readonly options: ProgressView;
  private liveLine: { outputMark: number; startedAt: number } | null = null;
  private readonly startedAt = new Map<number, number>();
  private runStart = Date.now();
  /** when the finally tasks began and their ceiling (null: the main tasks are running) */
  private finallyPhase: { start: number; ceiling: EffectiveLimit } | null = null;
  private running: RunningAttempt | null = null;
  /**
   * Where the live line is on the screen: "here" (the cursor is at its end), "below" (on the
   * line under a task's open line, the cursor back at that line's end), or not drawn.
   */
  private drawn: "here" | "below" | false = false;
  /** the task's output ended with a newline, so a line drawn now stands on its own */
  private outputAtLineStart = true;
  private redrawTimer: NodeJS.Timeout | undefined;
  private afterOutputTimer: NodeJS.Timeout | undefined;

  constructor(options: ProgressView) {
    this.options = options;
  }

  /** A line of its own: plain text with every control character escaped, or a styled one. */
  private write(line: string | Styled): void {
    this.clearLive();
    this.lineStart();
    this.options.out.write(`${typeof line === "string" ? escapeControls(line) : line.styled}\n`);
  }

  /** A line of its own starts here: task output that shares the lines is at a line start after it. */
  private lineStart(): void {
    if (!this.options.beforeLine) return;
    this.options.beforeLine();
    this.outputAtLineStart = true;
  }

  /** A line of its own (a signal received, say), below the task's output, above the live line. */
  say(line: string): void {
    this.write(line);
    this.drawLive();
  }

  /** The live line's text: elapsed against the timeout, time to the stall limit, the ceiling left. */
  liveText(now: number): string | null {
    const attempt = this.running;
    if (!attempt) return null;
    const elapsed = now - attempt.startedAt;
    const { timeout, stall } = attempt.limits;
    const clock = timeout
      ? `${wholeSeconds(elapsed, Math.floor)} of ${formatDuration(timeout.ms)} timeout`
      : `${wholeSeconds(elapsed, Math.floor)} (no timeout)`;
    const stallPart =
      stall.ms === 0
        ? "stall off"
        : `stall in ${wholeSeconds(attempt.lastOutputAt + stall.ms - now, Math.ceil)}`;
    const [label, ceilingLeft] = this.finallyPhase
      ? ["finallyCeiling", this.finallyPhase.start + this.finallyPhase.ceiling.ms - now]
      : ["ceiling", this.runStart + this.options.limits.ceiling.ms - now];
    return styled([
      "  ",
      [
        "2",
        `${attempt.name}: ${clock} · ${stallPart} · ${label} ${wholeSeconds(ceilingLeft, Math.ceil)} left`,
      ],
    ]).styled;
  }

  private drawLive(): void {
    if (!this.options.tty || this.running === null) return;
    const text = this.liveText(Date.now());
    if (text === null) return;
    if (this.options.outputOnTerminal && !this.outputAtLineStart) {
      // A partial line of task output (a progress bar) is open on the same terminal: the live
      // line goes on the line under it, and the cursor back where the task left it. Down and up
      // one line first (IND, RI: the column kept), so that at the screen's foot the scroll
      // happens before the cursor is saved (DECSC) and restored (DECRC).
      this.options.out.write(`\x1bD\x1bM\x1b7\x1bD\r\x1b[K${text}\x1b8`);
      this.drawn = "below";
      return;
    }
    this.options.out.write(`${this.drawn === "here" ? "\r\x1b[K" : ""}${text}`);
    this.drawn = "here";
  }

  private clearLive(): void {
    if (!this.drawn) return;
    this.options.out.write(this.drawn === "here" ? "\r\x1b[K" : "\x1b7\x1bD\r\x1b[K\x1b8");
    this.drawn = false;
  }

  private startLive(attempt: RunningAttempt): void {
    this.stopLive();
    this.running = attempt;
    this.drawLive();
    this.redrawTimer = setInterval(() => this.drawLive(), LIVE_REDRAW_MS);
    this.redrawTimer.unref();
  }

  private stopLive(): void {
    clearInterval(this.redrawTimer);
    clearTimeout(this.afterOutputTimer);
    this.redrawTimer = undefined;
    this.afterOutputTimer = undefined;
    this.running = null;
    this.clearLive();
  }

  /** Called before task output goes out: the live line makes way for it. */
  beforeOutput(): void {
    if (this.options.outputOnTerminal) this.clearLive();
  }

  /** Called after task output went out: the stall clock restarts and the live line comes back soon. */
  afterOutput(chunk: Uint8Array, at: number = Date.now()): void {
    if (chunk.length === 0) return;
    if (this.running) this.running.lastOutputAt = at;
    this.outputAtLineStart = chunk[chunk.length - 1] === 0x0a;
    if (!this.running || !this.options.tty || this.afterOutputTimer) return;
    this.afterOutputTimer = setTimeout(() => {
      this.afterOutputTimer = undefined;
      this.drawLive();
    }, LIVE_AFTER_OUTPUT_MS);
    this.afterOutputTimer.unref();
  }

  begin(name: string, taskCount: number, runStart: Date = new Date()): void {
    this.runStart = runStart.getTime();
    const { limits } = this.options;
    this.write(
      `playbook: running ${name}: ${taskCount} task${taskCount === 1 ? "" : "s"}, ceiling ${showLimit(limits.ceiling)}, ` +
        `stall ${limits.stall.ms === 0 ? "off" : formatDuration(limits.stall.ms)} (${limits.stall.source}), ` +
        `killGrace ${showLimit(limits.killGrace)}, ${showStartTimeout(limits.startTimeout, this.options.startsContainers)}`,
    );
  }

  /** `at`: when it happened, for events read back from a pod's log (progress-lines.ts) rather than seen live. */
  event(event: RunEvent, at: number = Date.now()): void {
    switch (event.type) {
      case "task-started": {
        if (event.attempt === 1) this.startedAt.set(event.index, at);
        this.stopLive();
        const limits = describeTaskLimits(
          event.limits,
          this.finallyPhase
            ? { finallyCeiling: this.finallyPhase.ceiling }
            : { ceiling: this.options.limits.ceiling },
        );
        const attempt = event.attempt > 1 ? `attempt ${event.attempt}/${event.limits.retries + 1}, ` : "";
        const where = this.options.where?.[event.index];
        if (this.options.tty) {
          this.write(
            styled([
              ["36", "▶"],
              ` ${event.name}${where ? ` ${where}` : ""}  `,
              ["2", `(${attempt}${limits})`],
            ]),
          );
          this.liveLine = { outputMark: this.options.outputBytes(), startedAt: at };
          this.startLive({ name: event.name, startedAt: at, limits: event.limits, lastOutputAt: at });
        } else {
          this.write(`playbook: task ${event.name} started${where ? ` ${where}` : ""} (${attempt}${limits})`);
        }
        return;
      }
      case "task-stopping": {
        this.stopLive();
        this.liveLine = null;
        const what =
          event.stop.kind === "cancelled" ? "is being cancelled" : `passed its ${event.stop.limit} limit`;
        const how =
          this.options.limits.killGrace.ms === 0
            ? "killing its process group at once (killGrace 0s)"
            : describeStop(event.stop, this.options.limits.killGrace.ms);
        this.write(`playbook: task ${event.name} ${what}: ${how}`);
        if (event.stop.warning) this.write(`playbook: warning: ${event.stop.warning}`);
        return;
      }
      case "task-retrying":
        this.stopLive();
        this.liveLine = null;
        this.write(
          `playbook: task ${event.name} ${event.signal ? `was killed by ${event.signal}` : `exited with code ${event.exitCode}`}; ` +
            `retrying in ${showWait(event.delayMs)} (attempt ${event.attempt}/${event.attempts})`,
        );
        return;
      case "task-finished": {
        this.stopLive();
        const { outcome } = event;
        const started = this.startedAt.get(event.index);
        const tookMs = event.tookMs ?? (started === undefined ? undefined : Math.max(0, at - started));
        const took = tookMs === undefined ? "" : ` in ${formatDuration(tookMs)}`;
        const detail = [
          outcome.limit ? outcome.limit : "",
          outcome.ending ? outcome.ending : "",
          outcome.exitCode !== null && outcome.phase !== "Succeeded" ? `exit code ${outcome.exitCode}` : "",
          outcome.signal ? outcome.signal : "",
          ...describeUsage(outcome),
        ]
          .filter(Boolean)
          .join(", ");
        const suffix = `${took}${detail ? ` (${detail})` : ""}`;
        if (this.options.tty) {
          const rewrite = this.liveLine !== null && this.liveLine.outputMark === this.options.outputBytes();
          const line = styled([
            SYMBOLS[outcome.phase] ?? "?",
            ` ${outcome.name}  ${outcome.phase}${suffix}`,
          ]).styled;
          this.lineStart();
          this.options.out.write(rewrite ? `\x1b[1A\r\x1b[K${line}\n` : `${line}\n`);
        } else {
          this.write(`playbook: task ${outcome.name} ${outcome.phase}${suffix}`);
        }
        this.liveLine = null;
        return;
      }
      case "finally-started": {
        this.stopLive();
        this.liveLine = null;
        this.finallyPhase = { start: at, ceiling: event.finallyCeiling };
        // progress-lines.ts reads it back (FINALLY_STARTED).
        this.write(
          `playbook: the main tasks ended (${event.outcome}${event.endingTask ? `: ${event.endingTask}` : ""}); ` +
            `running ${event.count} finally task${event.count === 1 ? "" : "s"} within finallyCeiling ${showLimit(event.finallyCeiling)}`,
        );
        return;
      }
      case "containment":
        for (const notice of event.notices ?? []) this.write(`playbook: ${notice}`);
        this.write(`playbook: containment: ${event.description}`);
        return;
      case "leftovers-swept":
        this.write(describeSweep(event.found, event.ended));
        for (const warning of event.warnings) this.write(`playbook: warning: ${warning}`);
        return;
      case "output-dropped":
        this.write(describeDrop(event.name, event.bytes, event.when));
        return;
    }
  }

  /** The run ended without a line of its own for the task that ran (a watch's end): no live line stays. */
  stop(): void {
    this.stopLive();
    this.liveLine = null;
  }

  end(outcome: RunOutcome, message: string): void {
    this.stopLive();
    const skipped = outcome.tasks.filter((t) => t.phase === "Skipped").map((t) => t.name);
    if (skipped.length > 0) this.write(`playbook: skipped: ${skipped.join(", ")}`);
    const finallySkipped = (outcome.finally ?? []).filter((t) => t.phase === "Skipped").map((t) => t.name);
    if (finallySkipped.length > 0)
      this.write(`playbook: finally tasks skipped: ${finallySkipped.join(", ")}`);
    this.write(`playbook: run ${outcome.phase} (${outcome.reason}): ${message}`);
  }
}
