// The interface through which a run shows its progress: the runner says what happens, the caller
// (the CLI's live lines, a pod's log) draws it. The runner never imports who draws.
import type { ResolvedLimits } from "../api/limits.js";
import type { RunOutcome } from "../api/report.js";
import type { RunEvent } from "./run.js";

/** What the runner knows of where progress goes, for whoever draws it. */
export interface ProgressView {
  out: NodeJS.WritableStream;
  tty: boolean;
  /** the run-level limits (a watch knows only those its begin line showed) */
  limits: Pick<ResolvedLimits, "ceiling" | "stall" | "killGrace" | "startTimeout">;
  /** bytes of task output written so far, to know whether a live line can be rewritten */
  outputBytes: () => number;
  /** task output goes to the same terminal, so the live line must make way for it */
  outputOnTerminal?: boolean;
  /** the run starts task containers (the start timeout bounds their start) */
  startsContainers?: boolean;
  /** where each task runs when it names an image: "in postgres:16 (podman)", "on the host, not in ..." */
  where?: readonly (string | undefined)[] | undefined;
  /**
   * Called before each line of its own goes out: where task output shares the lines, it ends a
   * task's open line first, so the line is not joined to it (task-lines.ts).
   */
  beforeLine?: () => void;
}

/** What the runner tells as the run goes. */
export interface ProgressSink {
  /** one line of the runner's own (a signal's effect, a warning) */
  say(line: string): void;
  begin(name: string, taskCount: number, runStart: Date): void;
  event(event: RunEvent): void;
  end(outcome: RunOutcome, message: string): void;
  /** around each piece of task output written to a terminal the progress shares */
  beforeOutput(): void;
  afterOutput(chunk: Uint8Array): void;
}

export type DrawProgress = (view: ProgressView) => ProgressSink;
