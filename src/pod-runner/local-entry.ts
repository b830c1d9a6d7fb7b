// The runner's entry for `playbook run`: a Playbook's spec on this machine, its image tasks in
// their containers or on the host, progress drawn by the caller; the report and exit code out.
import { EXIT, exitCodeForReason } from "../api/exit-codes.js";
import type { ResolvedLimits } from "../api/limits.js";
import type { PlaybookSpec } from "../api/playbook.js";
import type { LocalImages } from "./local-images.js";
import type { DrawProgress } from "./progress-sink.js";
import { runSession, type SessionResult } from "./session.js";

export interface LocalRunOptions {
  name: string;
  spec: Pick<PlaybookSpec, "tasks" | "shell" | "finally" | "cancel" | "resources">;
  limits: ResolvedLimits;
  /** how the tasks that name an image run (local-images.ts) */
  images?: LocalImages | undefined;
  /** where task output goes */
  output: NodeJS.WritableStream;
  progressOut: NodeJS.WritableStream;
  tty: boolean;
  draw: DrawProgress;
  /** --report FILE */
  reportPath?: string | undefined;
  /** the values of the Secrets given with --secret, printed as `***` (secret-mask.ts) */
  maskValues?: readonly string[];
}

export interface LocalRunResult extends SessionResult {
  /** DESIGN's exit code: the report's reason's, or 130 when interrupted */
  exitCode: number;
}

export async function runLocal(options: LocalRunOptions): Promise<LocalRunResult> {
  const { spec } = options;
  const result = await runSession({
    images: options.images,
    resources: spec.resources,
    name: options.name,
    tasks: spec.tasks,
    shell: spec.shell,
    ...(spec.finally?.length ? { finally: spec.finally } : {}),
    limits: options.limits,
    output: options.output,
    progressOut: options.progressOut,
    tty: options.tty,
    draw: options.draw,
    reportPath: options.reportPath,
    cancelled: spec.cancel,
    ...(options.maskValues?.length ? { maskValues: options.maskValues } : {}),
  });
  const exitCode = result.interrupted ? EXIT.interrupted : exitCodeForReason(result.report.reason);
  return { ...result, exitCode };
}
