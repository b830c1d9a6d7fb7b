// How each example in examples/ ends when run with `playbook run -f FILE -o json`: what its
// comment and the README's examples table promise. The local runs (test/runner/examples.test.ts)
// and the runs inside the image (test/image/examples.test.ts) both check against this one table.
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";

export interface ExampleOutcome {
  /** Relative to the checkout. */
  file: string;
  /** `playbook run`'s exit code. */
  code: number;
  /** The Succeeded condition's reason. */
  reason: string;
  /** Each task's phase, in order. */
  phases: string[];
  /** Each finally task's phase, in order, where the example has them. */
  finallyPhases?: string[];
  /** The first task's ending, where the example is about it. */
  ending?: "Exited" | "Killed";
  /** The run waits to be interrupted: send SIGINT (Ctrl-C) once its output holds this line. */
  interruptAfter?: string;
}

export const EXAMPLE_OUTCOMES: ExampleOutcome[] = [
  {
    file: "examples/hello.yaml",
    code: 0,
    reason: "Succeeded",
    phases: ["Succeeded", "Succeeded", "Succeeded"],
  },
  { file: "examples/retries.yaml", code: 0, reason: "Succeeded", phases: ["Succeeded"] },
  {
    file: "examples/task-timeout.yaml",
    code: 124,
    reason: "TaskTimeout",
    phases: ["Succeeded", "TimedOut", "Skipped"],
  },
  { file: "examples/stall.yaml", code: 124, reason: "StallLimit", phases: ["Succeeded", "TimedOut"] },
  {
    file: "examples/ceiling.yaml",
    code: 124,
    reason: "RunCeiling",
    phases: ["Succeeded", "TimedOut", "Skipped"],
  },
  {
    file: "examples/cooperative-stop.yaml",
    code: 124,
    reason: "TaskTimeout",
    phases: ["TimedOut"],
    ending: "Exited",
  },
  {
    file: "examples/cleanup.yaml",
    code: 1,
    reason: "TaskFailed",
    phases: ["Failed", "Skipped"],
    finallyPhases: ["Succeeded"],
  },
  { file: "examples/variable.yaml", code: 0, reason: "Succeeded", phases: ["Succeeded", "Succeeded"] },
  {
    file: "examples/cancel-me.yaml",
    code: 130,
    reason: "Cancelled",
    phases: ["Cancelled"],
    interruptAfter: "waiting; cancel me",
  },
];

/**
 * Every Playbook example in the checkout, relative to it: the table above must cover them all.
 * Other kinds beside them (examples/policy.yaml, a PlaybookPolicy) are not runs and are left out.
 */
export function exampleFiles(root: string): string[] {
  return readdirSync(path.join(root, "examples"))
    .filter((name) => /\.ya?ml$/.test(name))
    .filter((name) => /^kind: Playbook$/m.test(readFileSync(path.join(root, "examples", name), "utf8")))
    .map((name) => `examples/${name}`)
    .sort();
}

export interface SeenOutcome {
  code: number | null;
  reason: string | undefined;
  phases: (string | undefined)[];
  finallyPhases?: (string | undefined)[];
  ending?: string | undefined;
}

/** What a run printed (`-o json`'s status and the exit code), in the table's terms. */
export function seenOutcome(
  example: ExampleOutcome,
  code: number | null,
  status: {
    conditions?: { reason?: string }[];
    tasks?: { phase?: string; ending?: string }[];
    finally?: { phase?: string }[];
  },
): SeenOutcome {
  return {
    code,
    reason: status.conditions?.[0]?.reason,
    phases: (status.tasks ?? []).map((t) => t.phase),
    ...(example.finallyPhases ? { finallyPhases: (status.finally ?? []).map((t) => t.phase) } : {}),
    // The ending is compared only where the example is about it.
    ...(example.ending ? { ending: status.tasks?.[0]?.ending } : {}),
  };
}

/** The table's promise in the same shape, for one toEqual. */
export function promisedOutcome(example: ExampleOutcome): SeenOutcome {
  return {
    code: example.code,
    reason: example.reason,
    phases: example.phases,
    ...(example.finallyPhases ? { finallyPhases: example.finallyPhases } : {}),
    ...(example.ending ? { ending: example.ending } : {}),
  };
}
