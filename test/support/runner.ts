// Shared by the runner suites: build a run from a few task lines, capture its output, and check
// that nothing a test started is still alive afterwards (every task carries the test's marker).
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import { afterEach, expect } from "vitest";
import { type LimitDefaults, LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { type PlaybookSpec, PlaybookSpecSchema } from "../../src/api/playbook.js";
import type { RunOutcome } from "../../src/api/report.js";
import type { Containment } from "../../src/pod-runner/containment.js";
import type { ProcessTable } from "../../src/pod-runner/process-table.js";
import { type RunEvent, runPlaybook } from "../../src/pod-runner/run.js";
import { processesWithEnv } from "./processes.js";

export const MARKER_VAR = "RUNNER_TEST_MARKER";

export { processesWithEnv };

export interface TestRun {
  outcome: RunOutcome;
  output: string;
  outputBytes: Buffer;
  events: RunEvent[];
  elapsedMs: number;
}

export function newMarker(): string {
  return randomUUID();
}

/**
 * A fresh marker for each test, and after each test the check that no process carrying it is
 * still alive. Returns a getter for the current test's marker.
 */
export function checkNothingLeftBehind(): () => string {
  let marker = newMarker();
  afterEach(() => {
    const left = processesWithEnv(MARKER_VAR, marker);
    marker = newMarker();
    expect(left, "processes of this test still alive").toEqual([]);
  });
  return () => marker;
}

export async function runSpec(
  spec: unknown,
  options: {
    marker: string;
    defaults?: LimitDefaults;
    prefixOutput?: boolean;
    cancelSignal?: AbortSignal;
    /** ends the finally tasks (runPlaybook's finallyCancelSignal) */
    finallyCancelSignal?: AbortSignal;
    runStart?: Date;
    /** where task output goes instead of the captured buffer (output is then empty) */
    sink?: Writable;
    hurrySignal?: AbortSignal;
    /**
     * Called with all output so far each time output arrives, before the runner reads on: a test
     * that acts on a marker the task printed (cancels once it is ready) acts before the task's
     * pipes can close.
     */
    onOutput?: (soFar: string) => void;
    onEvent?: (event: RunEvent) => void;
    drainWindowMs?: number;
    /** where the runner looks for the tasks' processes (a fake /proc) */
    processTable?: ProcessTable;
    /** what holds the run's processes (default: the best this machine offers) */
    containment?: (runId: string) => Containment;
    /** the jitter of the retry waits (runPlaybook's random) */
    random?: () => number;
  },
): Promise<TestRun> {
  const parsed: PlaybookSpec = PlaybookSpecSchema.parse(spec);
  const limits = resolveLimits(parsed, options.defaults ?? LOCAL_DEFAULTS);
  const chunks: Buffer[] = [];
  // A writable that takes each chunk as it is written (a PassThrough hands it on a tick later).
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      chunks.push(chunk);
      if (options.onOutput) options.onOutput(Buffer.concat(chunks).toString("utf8"));
      callback();
    },
  });
  const events: RunEvent[] = [];
  const started = performance.now();
  const outcome = await runPlaybook({
    tasks: parsed.tasks,
    ...(parsed.finally ? { finally: parsed.finally } : {}),
    ...(options.finallyCancelSignal ? { finallyCancelSignal: options.finallyCancelSignal } : {}),
    shell: parsed.shell,
    limits,
    sink: options.sink ?? sink,
    prefixOutput: options.prefixOutput,
    cancelSignal: options.cancelSignal,
    hurrySignal: options.hurrySignal,
    runStart: options.runStart,
    onEvent: (event) => {
      events.push(event);
      options.onEvent?.(event);
    },
    drainWindowMs: options.drainWindowMs,
    processTable: options.processTable,
    ...(options.containment ? { containment: options.containment } : {}),
    ...(options.random ? { random: options.random } : {}),
    baseEnv: { PATH: process.env.PATH, [MARKER_VAR]: options.marker },
  });
  const elapsedMs = performance.now() - started;
  const outputBytes = Buffer.concat(chunks);
  return { outcome, output: outputBytes.toString("utf8"), outputBytes, events, elapsedMs };
}
