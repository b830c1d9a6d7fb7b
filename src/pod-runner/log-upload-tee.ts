// The pod runner's log, written to its stdout as ever, and on its way into the archive too when
// the controller handed it an upload plan (a file in the runner's own Secret volume, named by
// $PLAYBOOK_LOG_UPLOAD_FILE). The upload never holds the log back: LogUploader.write only copies.
// At the run's end the runner waits at most FINISH_MS for the store to take the last bytes.
import { readFileSync } from "node:fs";
import { LOG_UPLOAD_FILE_ENV_VAR, LogUploadPlanSchema } from "../api/log-upload.js";
import { LogUploader } from "./log-upload.js";

/** How long the runner's end waits for the store to take its last segment and index. */
export const FINISH_MS = 3_000;

export interface TeedOutput {
  output: NodeJS.WritableStream;
  /** The upload's end; nothing to wait for without a plan. */
  finish: () => Promise<void>;
}

/**
 * The output the run writes to: `target` alone without a plan, else `target` and the upload. A
 * plan that cannot be read is said on `target`, once, and the run goes on without the upload.
 */
export function teeLogUpload(target: NodeJS.WritableStream, env: NodeJS.ProcessEnv): TeedOutput {
  const file = env[LOG_UPLOAD_FILE_ENV_VAR];
  if (!file) return { output: target, finish: async () => {} };
  let uploader: LogUploader;
  try {
    const plan = LogUploadPlanSchema.parse(JSON.parse(readFileSync(file, "utf8")));
    uploader = new LogUploader(plan, {
      log: (message) => target.write(`[playbook] log archive: ${message}\n`),
    });
  } catch (error) {
    target.write(
      `[playbook] log archive: the upload plan ${file} cannot be read (${error instanceof Error ? error.message : String(error)}); this attempt's log is not archived\n`,
    );
    return { output: target, finish: async () => {} };
  }
  // The stream's own write, wrapped on the instance: every other use of it (cork, drain, its fd
  // for sameTarget) stays the stream's, and a write costs one copy more, not a stream's hop (the
  // runner writes a line's prefix and its bytes apart, some million writes for 100 MiB).
  const write = target.write as (chunk: unknown, encoding: unknown, callback: unknown) => boolean;
  const teed = function (
    this: NodeJS.WritableStream,
    chunk: unknown,
    encoding?: unknown,
    callback?: unknown,
  ): boolean {
    uploader.write(typeof chunk === "string" ? Buffer.from(chunk) : (chunk as Uint8Array));
    return write.call(this, chunk, encoding, callback);
  };
  target.write = teed as NodeJS.WritableStream["write"];
  return {
    output: target,
    finish: async () => {
      if (target.write === teed) target.write = write as NodeJS.WritableStream["write"];
      await uploader.finish(FINISH_MS);
    },
  };
}
