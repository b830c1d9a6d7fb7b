// The runner's entry for `playbook run`: a Playbook's spec on this machine, its image tasks in
// their containers or on the host, progress drawn by the caller; the report and exit code out.
import { EXIT, exitCodeForReason } from "../api/exit-codes.js";
import type { PlaybookSpec } from "../api/playbook.js";
import { runSession, type SessionOptions, type SessionResult } from "./session.js";

/** The session's own options as they are, and the Playbook's spec they run. */
export interface LocalRunOptions
  extends Pick<
    SessionOptions,
    "name" | "limits" | "images" | "output" | "progressOut" | "tty" | "draw" | "reportPath" | "maskValues"
  > {
  spec: Pick<PlaybookSpec, "tasks" | "shell" | "finally" | "cancel" | "resources">;
}

export interface LocalRunResult extends SessionResult {
  /** DESIGN's exit code: the report's reason's, or 130 when interrupted */
  exitCode: number;
}

export async function runLocal(options: LocalRunOptions): Promise<LocalRunResult> {
  const { spec, ...session } = options;
  const result = await runSession({
    ...session,
    tasks: spec.tasks,
    shell: spec.shell,
    ...(spec.finally?.length ? { finally: spec.finally } : {}),
    resources: spec.resources,
    cancelled: spec.cancel,
  });
  const exitCode = result.interrupted ? EXIT.interrupted : exitCodeForReason(result.report.reason);
  return { ...result, exitCode };
}
