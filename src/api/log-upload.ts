// The runner's own upload of its log into the archive: what the controller hands the runner (a
// file of presigned URLs in a Secret only the runner's container mounts) and what the runner
// keeps beside its segments in the store (the index). Each URL PUTs one key of the attempt's
// folder and nothing else, so the runner holds no credential and reaches no other run's objects.
//
// The runner cuts what it writes to its stdout into segments of `segmentBytes`: segment n < head
// length goes to head[n]; later ones to the tail slots, tail[(n - head length) % tail length],
// each replacing the segment there before it (the cap keeps the head and the tail). The segment
// being filled is PUT again every `flushMs` while it grows, and the index after it, so a pod that
// is lost takes at most `flushMs` of output with it.
import { z } from "zod";

export const LOG_UPLOAD_VERSION = 1;
/** S3 wants every part but the last to hold 5 MiB; the controller composes the segments as parts. */
export const MIN_SEGMENT_BYTES = 5 * 1024 * 1024;
export const MAX_SEGMENT_BYTES = 64 * 1024 * 1024;
/** Where the runner finds its plan's file: set on the runner container only. */
export const LOG_UPLOAD_FILE_ENV_VAR = "PLAYBOOK_LOG_UPLOAD_FILE";

const PresignedUrl = z.url({ protocol: /^https?$/ });

export const LogUploadPlanSchema = z.strictObject({
  v: z.literal(LOG_UPLOAD_VERSION),
  segmentBytes: z.number().int().min(MIN_SEGMENT_BYTES).max(MAX_SEGMENT_BYTES),
  flushMs: z.number().int().min(100).max(60_000),
  /** One URL per head segment, in order (at least one). */
  head: z.array(PresignedUrl).min(1).max(4096),
  /** The tail's slots, reused in turn; empty: nothing is kept past the head. */
  tail: z.array(PresignedUrl).max(4096),
  /** The index object's URL. */
  index: PresignedUrl,
});
export type LogUploadPlan = z.infer<typeof LogUploadPlanSchema>;

/**
 * The runner's index: how far its upload got. Written after each segment's PUT (and with each
 * flush), and with `done` once the runner ended; `failed` once it gave up (the store refused or
 * did not keep up): what came before stays.
 */
export const LogUploadIndexSchema = z.strictObject({
  v: z.literal(LOG_UPLOAD_VERSION),
  /** Segments begun (the last may be partial): segment n is in head[n] or tail[(n - head) % tail]. */
  segments: z.number().int().min(0),
  /** Bytes the runner wrote to its log so far (kept or not). */
  bytes: z.number().int().min(0),
  /** Bytes of the last segment as the store holds it. */
  lastSegmentBytes: z.number().int().min(0),
  /** The runner ended and its last segment is in the store. */
  done: z.boolean(),
  failed: z.string().max(500).optional(),
});
export type LogUploadIndex = z.infer<typeof LogUploadIndexSchema>;
