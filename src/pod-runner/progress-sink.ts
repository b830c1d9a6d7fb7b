// The interface through which a run shows its progress: the runner says what happens, the caller
// (the CLI's live lines, a pod's log) draws it. The runner never imports who draws.
import type { ResolvedLimits } from "../api/limits.js";
import type { RunOutcome } from "../api/report.js";
import type { RunEvent } from "./run.js";

/** What the runner knows of where progress goes, for whoever draws it. */
export interface ProgressView {
  out: NodeJS.WritableStream;
  tty: boolean;
  limits: Pick<ResolvedLimits, "ceiling" | "stall" | "killGrace" | "startTimeout">;
  /** bytes of task output written so far */
  outputBytes: () => number;
  /** task output goes to the same terminal */
  outputOnTerminal?: boolean;
  /** the run starts task containers */
  startsContainers?: boolean;
  /** where each task runs when it names an image */
  where?: readonly (string | undefined)[] | undefined;
  /** called before each progress line where task output shares the lines: ends a task's open line */
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
