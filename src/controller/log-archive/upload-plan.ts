// The plan the controller hands a runner that uploads its own log (src/api/log-upload.ts): one
// presigned PUT per head segment and per tail slot of the attempt, and one for the index, all
// under the attempt's own key, so the runner can write nothing else. The head and the tail follow
// the run's cap as the controller's own upload cuts it (archive-cap.ts), in whole segments.
import { z } from "zod";
import {
  LOG_UPLOAD_VERSION,
  type LogUploadPlan,
  MAX_SEGMENT_BYTES,
  MIN_SEGMENT_BYTES,
} from "../../api/log-upload.js";
import { capPlan } from "./archive-cap.js";
import { headSegmentKey, tailSlotKey, uploadIndexKey, uploadShapeKey } from "./archive-keys.js";
import type { ArchiveStore } from "./archive-store.js";

export const UPLOAD_SEGMENT_BYTES = 8 * 1024 * 1024;
export const UPLOAD_FLUSH_MS = 2_000;
/** SigV4 signs for at most 7 days. */
export const MAX_PRESIGN_SECONDS = 7 * 24 * 3600;

/**
 * How many head segments and tail slots a cap gives: the head about half of it in whole segments,
 * the tail the rest, with slots enough for the segments that hold its last `tailBytes` (the last
 * one partial, the one before it cut), and one more: the slot the runner fills next, never read
 * (upload-compose.ts's segmentSource), as it may hold a segment the index does not name yet.
 */
export function uploadShape(capBytes: number, segmentBytes = UPLOAD_SEGMENT_BYTES): UploadShape {
  const plan = capPlan(capBytes, segmentBytes);
  const tail = plan.tailBytes === 0 ? 0 : Math.floor(plan.tailBytes / segmentBytes) + 3;
  return { head: plan.headBytes / segmentBytes, tail, tailBytes: plan.tailBytes, segmentBytes };
}

const ShapeSchema = z.strictObject({
  head: z.number().int().min(1),
  tail: z.number().int().min(0),
  /** The cap's tail: the object keeps at most this many bytes after the head. */
  tailBytes: z.number().int().min(0),
  segmentBytes: z.number().int().min(MIN_SEGMENT_BYTES).max(MAX_SEGMENT_BYTES),
});
export type UploadShape = z.infer<typeof ShapeSchema>;

/** The shape kept beside the segments when the plan is made: the cap may change while the run goes on. */
export async function keepShape(
  store: Pick<ArchiveStore, "putObject">,
  logKey: string,
  shape: UploadShape,
): Promise<void> {
  await store.putObject(uploadShapeKey(logKey), JSON.stringify(shape), "application/json");
}

/** The shape kept with the upload, else the one the cap gives now. */
export async function shapeOf(
  store: Pick<ArchiveStore, "readJson">,
  logKey: string,
  capBytes: number,
): Promise<UploadShape> {
  return (await store.readJson(uploadShapeKey(logKey), ShapeSchema)) ?? uploadShape(capBytes);
}

export async function uploadPlan(
  store: Pick<ArchiveStore, "presignPut" | "putObject">,
  logKey: string,
  args: { capBytes: number; validForSeconds: number; segmentBytes?: number; flushMs?: number },
  /** The shape could not be kept beside the segments: a store that does not answer now holds no pod back. */
  onKeepFailed: (error: unknown) => void = () => {},
): Promise<LogUploadPlan> {
  const segmentBytes = args.segmentBytes ?? UPLOAD_SEGMENT_BYTES;
  const shape = uploadShape(args.capBytes, segmentBytes);
  await keepShape(store, logKey, shape).catch(onKeepFailed);
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
