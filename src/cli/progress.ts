// Progress on stderr: plain lines for logs and pipes; on a terminal, one line per task that is
// rewritten in place when the task ends (as long as no task output came in between).
import { formatDuration } from "../api/duration.js";
import type { EffectiveLimit, ResolvedLimits, TaskLimits } from "../api/limits.js";
import type { RunOutcome } from "../api/report.js";
import type { RunEvent } from "../pod-runner/run.js";

export function showLimit(limit: EffectiveLimit): string {
  return `${formatDuration(limit.ms)} (${limit.source})`;
}

export function describeTaskLimits(task: TaskLimits, run: ResolvedLimits): string {
  const timeout = task.timeout ? `timeout ${showLimit(task.timeout)}` : "no timeout of its own";
  const stall = task.stall.ms === 0 ? `stall off (${task.stall.source})` : `stall ${showLimit(task.stall)}`;
  return `${timeout}, ${stall}, ceiling ${showLimit(run.ceiling)}`;
}

export interface ProgressOptions {
  out: NodeJS.WritableStream;
  tty: boolean;
  limits: ResolvedLimits;
  /** bytes of task output written so far, to know whether a live line can be rewritten */
  outputBytes: () => number;
}

const SYMBOLS: Record<string, string> = {
  Succeeded: "\x1b[32m✓\x1b[0m",
  Failed: "\x1b[31m✗\x1b[0m",
  TimedOut: "\x1b[31m⏱\x1b[0m",
  Cancelled: "\x1b[33m■\x1b[0m",
  Skipped: "\x1b[2m-\x1b[0m",
};

export class Progress {
  private readonly options: ProgressOptions;
  private liveLine: { outputMark: number; startedAt: number } | null = null;
  private readonly startedAt = new Map<number, number>();

  constructor(options: ProgressOptions) {
    this.options = options;
  }

  private write(line: string): void {
    this.options.out.write(`${line}\n`);
  }

  begin(name: string, taskCount: number): void {
    const { limits } = this.options;
    this.write(
      `playbook: running ${name}: ${taskCount} task${taskCount === 1 ? "" : "s"}, ceiling ${showLimit(limits.ceiling)}, ` +
        `stall ${limits.stall.ms === 0 ? "off" : formatDuration(limits.stall.ms)} (${limits.stall.source}), ` +
        `killGrace ${showLimit(limits.killGrace)}`,
    );
  }

  event(event: RunEvent): void {
    switch (event.type) {
      case "task-started": {
        if (event.attempt === 1) this.startedAt.set(event.index, Date.now());
        const limits = describeTaskLimits(event.limits, this.options.limits);
        const attempt = event.attempt > 1 ? `attempt ${event.attempt}/${event.limits.retries + 1}, ` : "";
        if (this.options.tty) {
          this.write(`\x1b[36m▶\x1b[0m ${event.name}  \x1b[2m(${attempt}${limits})\x1b[0m`);
          this.liveLine = { outputMark: this.options.outputBytes(), startedAt: Date.now() };
        } else {
          this.write(`playbook: task ${event.name} started (${attempt}${limits})`);
        }
        return;
      }
      case "task-stopping": {
        this.liveLine = null;
        const what =
          event.stop.kind === "cancelled" ? "is being cancelled" : `passed its ${event.stop.limit} limit`;
        const how =
          this.options.limits.killGrace.ms === 0
            ? "killing its process group at once (killGrace 0s)"
            : `cancel file written, SIGTERM sent to its process group, SIGKILL in ${formatDuration(this.options.limits.killGrace.ms)}`;
        this.write(`playbook: task ${event.name} ${what}: ${how}`);
        if (event.stop.warning) this.write(`playbook: warning: ${event.stop.warning}`);
        return;
      }
      case "task-retrying":
        this.liveLine = null;
        this.write(
          `playbook: task ${event.name} ${event.signal ? `was killed by ${event.signal}` : `exited with code ${event.exitCode}`}; ` +
            `retrying (attempt ${event.attempt})`,
        );
        return;
      case "task-finished": {
        const { outcome } = event;
        const started = this.startedAt.get(event.index);
        const took = started === undefined ? "" : ` in ${formatDuration(Date.now() - started)}`;
        const detail = [
          outcome.limit ? outcome.limit : "",
          outcome.ending ? outcome.ending : "",
          outcome.exitCode !== null && outcome.phase !== "Succeeded" ? `exit code ${outcome.exitCode}` : "",
          outcome.signal ? outcome.signal : "",
        ]
          .filter(Boolean)
          .join(", ");
        const suffix = `${took}${detail ? ` (${detail})` : ""}`;
        if (this.options.tty) {
          const rewrite = this.liveLine !== null && this.liveLine.outputMark === this.options.outputBytes();
          const line = `${SYMBOLS[outcome.phase] ?? "?"} ${outcome.name}  ${outcome.phase}${suffix}`;
          this.options.out.write(rewrite ? `\x1b[1A\r\x1b[K${line}\n` : `${line}\n`);
        } else {
          this.write(`playbook: task ${outcome.name} ${outcome.phase}${suffix}`);
        }
        this.liveLine = null;
        return;
      }
      case "leftovers-killed":
        this.write(`playbook: ended ${event.count} process(es) that tasks left running`);
        return;
    }
  }

  end(outcome: RunOutcome, message: string): void {
    const skipped = outcome.tasks.filter((t) => t.phase === "Skipped").map((t) => t.name);
    if (skipped.length > 0) this.write(`playbook: skipped: ${skipped.join(", ")}`);
    this.write(`playbook: run ${outcome.phase} (${outcome.reason}): ${message}`);
  }
}
