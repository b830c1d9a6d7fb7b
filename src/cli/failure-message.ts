// How a failure the command throws becomes its exit code and its message (runProgram reports it).
import { z } from "zod";
import { InvalidPlaybookError } from "../api/manifest.js";
import { escapeControls } from "../api/visible-text.js";
import { EXIT } from "./exit-codes.js";
import { InvalidPolicyFileError } from "./policy-file-error.js";
import { helpfulProblem } from "./problems.js";

/** A mistake in how the command was called or what it was given: its message is all there is to say. */
export class UsageError extends Error {}

/**
 * An error's stack with its message escaped (src/api/visible-text.ts) and its frames, one a line,
 * as they are: the message may quote a path or a value with a newline in it.
 */
function visibleStack(error: unknown): string {
  if (!(error instanceof Error)) return escapeControls(String(error));
  const stack = error.stack ?? "";
  const header = `${error.name}: ${error.message}`;
  if (!stack.startsWith(header)) return escapeControls(header);
  return `${escapeControls(header)}${stack.slice(header.length)}`;
}

/**
 * The failure's exit code and its message, one line each: every value a message quotes shows its
 * control characters as escapes, so none of it starts a line of its own (in a pod, the runner's
 * stderr is its log, where a line that starts with the progress marker is taken for a record).
 */
export function describeFailure(error: unknown): { code: number; message: string } {
  const failure = describeFailureText(error);
  return failure.lines
    ? { code: failure.code, message: failure.lines }
    : { code: failure.code, message: escapeControls(failure.message) };
}

function describeFailureText(error: unknown): { code: number; message: string; lines?: string } {
  if (error instanceof InvalidPlaybookError) {
    const problems = error.problems.map(helpfulProblem).map((problem) => ({
      path: escapeControls(problem.path),
      message: escapeControls(problem.message),
    }));
    const helpful = new InvalidPlaybookError(escapeControls(error.source), problems);
    return { code: EXIT.invalid, message: "", lines: helpful.message };
  }
  // ClusterError (cluster/connection.ts) and FlagError (cluster/flags.ts), not loaded here: their
  // message is all there is to say, with the exit code the failure calls for.
  const name = (error as Error | undefined)?.name;
  // Its lines (what failed, then what the connection or the API server said, indented) are escaped
  // one by one: a cluster command never writes to a pod's log.
  if (name === "ClusterError" || name === "FlagError") {
    const code = (error as { exitCode?: unknown }).exitCode;
    const lines = (error as Error).message.split("\n").map(escapeControls).join("\n");
    return { code: typeof code === "number" ? code : EXIT.invalid, message: "", lines: `playbook: ${lines}` };
  }
  // Its lines are escaped one by one where it is made (policy-file-error.ts).
  if (error instanceof InvalidPolicyFileError)
    return { code: EXIT.invalid, message: "", lines: `playbook: ${error.message}` };
  // LocalStartError (src/pod-runner/local-run.ts, not loaded here): the task containers did not
  // start; MaskDirError (src/pod-runner/secret-mask.ts): the secrets to mask could not be read.
  if (error instanceof UsageError || name === "LocalStartError" || name === "MaskDirError")
    return { code: EXIT.invalid, message: `playbook: ${error instanceof Error ? error.message : ""}` };
  if (error instanceof z.ZodError) {
    return {
      code: EXIT.invalid,
      message: `playbook: ${error.issues.map((i) => `${i.path.join(".") || "input"}: ${i.message}`).join("; ")}`,
    };
  }
  return { code: EXIT.failed, message: "", lines: `playbook: ${visibleStack(error)}` };
}
