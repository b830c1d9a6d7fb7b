// The plan the controller hands a runner that uploads its own log (src/api/log-upload.ts): one
// presigned PUT per head segment and per tail slot of the attempt, and one for the index, all
// under the attempt's own key, so the runner can write nothing else. The head and the tail follow
// the run's cap as the controller's own upload cuts it (archive-cap.ts), in whole segments.
import { LOG_UPLOAD_VERSION, type LogUploadPlan } from "../../api/log-upload.js";
import { capPlan } from "./archive-cap.js";
import { headSegmentKey, tailSlotKey, uploadIndexKey } from "./archive-keys.js";
import type { ArchiveStore } from "./archive-store.js";

export const UPLOAD_SEGMENT_BYTES = 8 * 1024 * 1024;
export const UPLOAD_FLUSH_MS = 2_000;
/** SigV4 signs for at most 7 days. */
export const MAX_PRESIGN_SECONDS = 7 * 24 * 3600;

/** How many head segments and tail slots a cap gives: the head about half of it, the tail the rest. */
export function uploadShape(
  capBytes: number,
  segmentBytes = UPLOAD_SEGMENT_BYTES,
): { head: number; tail: number } {
  const plan = capPlan(capBytes, segmentBytes);
  return { head: plan.headBytes / segmentBytes, tail: Math.floor(plan.tailBytes / segmentBytes) };
}

export async function uploadPlan(
  store: Pick<ArchiveStore, "presignPut">,
  logKey: string,
  args: { capBytes: number; validForSeconds: number; segmentBytes?: number; flushMs?: number },
): Promise<LogUploadPlan> {
  const segmentBytes = args.segmentBytes ?? UPLOAD_SEGMENT_BYTES;
  const shape = uploadShape(args.capBytes, segmentBytes);
  const seconds = Math.min(MAX_PRESIGN_SECONDS, Math.max(60, Math.ceil(args.validForSeconds)));
  const sign = (key: string) => store.presignPut(key, seconds);
  return {
    v: LOG_UPLOAD_VERSION,
    segmentBytes,
    flushMs: args.flushMs ?? UPLOAD_FLUSH_MS,
    head: await Promise.all(Array.from({ length: shape.head }, (_, n) => sign(headSegmentKey(logKey, n)))),
    tail: await Promise.all(Array.from({ length: shape.tail }, (_, j) => sign(tailSlotKey(logKey, j)))),
    index: await sign(uploadIndexKey(logKey)),
  };
}
