// Settles a task's outcome (from its last attempt, or when a cancel or a limit kept it from starting), apart from run.ts.
import { formatDuration } from "../api/duration.js";
import type { EffectiveLimit } from "../api/limits.js";
import type { TaskPhase } from "../api/reasons.js";
import { quoteLastLine, type TaskOutcome } from "../api/report.js";
import type { AttemptResult } from "./attempt.js";

/** What stops a task from (re)starting: a cancel, or the ceiling of its phase. */
export type StopBeforeStart = "Cancelled" | "RunCeiling" | "FinallyCeiling";

/** A finally task that did not start because the finally window had passed: it never ran. */
export function markWindowPassed(outcome: TaskOutcome, finallyCeiling: EffectiveLimit): void {
  outcome.phase = "Skipped";
  outcome.detail = `not started: the finally window ${formatDuration(finallyCeiling.ms)} (${finallyCeiling.field}) had passed`;
}

/** Settles a task that a cancellation or the ceiling kept from (re)starting. */
export function markStopped(outcome: TaskOutcome, stop: StopBeforeStart): TaskPhase {
  outcome.completionTime = new Date();
  if (stop === "Cancelled") {
    outcome.phase = "Cancelled";
  } else {
    outcome.phase = "TimedOut";
    outcome.limit = stop;
  }
  return outcome.phase;
}

/** How a stopped attempt ended; one the kill did not end has no ending, and says what was left. */
function settleEnding(outcome: TaskOutcome, result: AttemptResult): void {
  if (result.ending !== undefined) outcome.ending = result.ending;
  else delete outcome.ending;
  if (result.unended !== undefined) outcome.detail = result.unended;
  if (result.graceCutAfterMs !== undefined) outcome.graceCutAfterMs = result.graceCutAfterMs;
}

/** Turns the last attempt's result into the task's outcome; only the limit's firer decides TimedOut. */
export function settleTask(outcome: TaskOutcome, result: AttemptResult): TaskPhase {
  outcome.completionTime = result.completionTime;
  outcome.exitCode = result.exitCode;
  outcome.signal = result.signal;
  // The last attempt's cost, where its launcher measured it.
  if (result.usage?.cpuSeconds !== undefined) outcome.cpuSeconds = result.usage.cpuSeconds;
  if (result.usage?.peakMemoryBytes !== undefined) outcome.peakMemoryBytes = result.usage.peakMemoryBytes;
  if (result.longestSilenceMs !== undefined) outcome.longestSilenceMs = result.longestSilenceMs;
  else delete outcome.longestSilenceMs;
  switch (result.kind) {
    case "limit":
      outcome.phase = "TimedOut";
      outcome.limit = result.limit;
      settleEnding(outcome, result);
      break;
    case "cancelled":
      outcome.phase = "Cancelled";
      settleEnding(outcome, result);
      break;
    case "spawn-error":
      outcome.phase = "Failed";
      outcome.detail = result.spawnError;
      break;
    case "lost": {
      outcome.phase = "Failed";
      outcome.lostContainer = result.lostContainer;
      const last = result.tail.lastLine();
      outcome.detail = result.spawnError
        ? result.spawnError
        : `container ${result.lostContainer} ended while the task ran (its agent's connection closed)${last ? `; last output on ${quoteLastLine(last)}` : ""}`;
      break;
    }
    case "exited": {
      outcome.phase = result.exitCode === 0 ? "Succeeded" : "Failed";
      const last = result.tail.lastLine();
      if (outcome.phase === "Failed" && result.execFailure) outcome.detail = result.execFailure;
      else if (outcome.phase === "Failed" && result.outOfMemory) {
        // Named first: the report keeps the start of a message it has to shorten.
        outcome.detail = `out of memory: ${result.outOfMemory} (SIGKILL)${last ? `; last output on ${quoteLastLine(last)}` : ""}`;
      } else if (outcome.phase === "Failed" && last) outcome.detail = quoteLastLine(last);
      break;
    }
  }
  return outcome.phase;
}
