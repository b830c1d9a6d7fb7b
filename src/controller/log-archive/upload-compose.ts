// The attempt's log object made of what its runner uploaded (src/api/log-upload.ts): the head
// segments, then the tail slots in the order the runner filled them, composed by the store. What
// the runner says of its upload (the index) is checked against what the store holds: a segment
// missing, or short of its size, ends the object there, and the object says no more than the
// store's segments hold. Past the cap, the line saying how much was left out opens the tail
// (archive-cap.ts's words). The segments go once the object is complete.
import { createHash } from "node:crypto";
import { type LogUploadIndex, LogUploadIndexSchema } from "../../api/log-upload.js";
import { leftOutLine } from "./archive-cap.js";
import { headSegmentKey, tailSlotKey, uploadIndexKey, uploadSegmentsPrefix } from "./archive-keys.js";
import type { ArchiveStore, ComposeSource } from "./archive-store.js";
import type { UploadShape } from "./upload-plan.js";

/**
 * Segment n's key: a head segment, a tail slot, or none (left out: its slot was used again). The
 * oldest slot is never read: it is where segment `segments` goes next, and a runner lost between
 * that segment's PUT and its index's left newer bytes in it than the index says.
 */
export function segmentSource(
  logKey: string,
  shape: UploadShape,
  segments: number,
  n: number,
): string | undefined {
  if (n < shape.head) return headSegmentKey(logKey, n);
  if (shape.tail === 0 || n <= segments - shape.tail) return undefined;
  return tailSlotKey(logKey, (n - shape.head) % shape.tail);
}

export interface ComposedAttempt {
  bytes: number;
  sha256: string;
  /** Bytes the cap left out. */
  leftOut: number;
  /** Bytes the runner wrote, as its index says (what it wrote past a failure included). */
  received: number;
  /** The runner's index, when it wrote one that reads. */
  index: LogUploadIndex | undefined;
  /** The store holds less than the index says: which segment, and why. */
  short: string | undefined;
}

/**
 * Composes `logKey` of the attempt's uploaded segments and removes them; undefined when the runner
 * uploaded nothing (no index and no first segment).
 */
export async function composeUploadedAttempt(
  store: ArchiveStore,
  logKey: string,
  shape: UploadShape,
): Promise<ComposedAttempt | undefined> {
  const index = await store.readJson(uploadIndexKey(logKey), LogUploadIndexSchema);
  const sizes = await store.listSizes(uploadSegmentsPrefix(logKey));
  // Without an index, only the head can be read in order: its segments from the first on.
  let segments = index?.segments ?? 0;
  if (index === undefined)
    while (segments < shape.head && sizes.has(headSegmentKey(logKey, segments))) segments++;
  if (index === undefined && segments === 0) return undefined;

  const present: Present[] = [];
  let short: string | undefined;
  for (let n = 0; n < segments; n++) {
    const key = segmentSource(logKey, shape, segments, n);
    if (key === undefined) continue;
    const bytes = sizes.get(key);
    if (bytes === undefined) {
      short = `segment ${n} is not in the store`;
      break;
    }
    present.push({ n, key, bytes });
    // A segment short of its size is the runner's last flush of it: the bytes after are not there.
    if (n < segments - 1 && bytes !== shape.segmentBytes) {
      short = `segment ${n} holds ${bytes} bytes, not ${shape.segmentBytes}`;
      break;
    }
  }
  const head = present.filter((p) => p.n < shape.head);
  const tail = present.filter((p) => p.n >= shape.head);
  const cut = tailCut(tail, shape);
  const sources: ComposeSource[] = head.map(({ key }) => ({ key }));
  if (cut.leftOut === 0) sources.push(...tail.map(({ key }) => ({ key })));
  else {
    // The line saying what was left out opens the tail, with the end of the segment before the
    // kept ones: parts of their own would be under S3's 5 MiB, so they join the first kept segment.
    const keptBytes = cut.suffix + cut.kept.reduce((sum, k) => sum + k.bytes, 0);
    const line = leftOutLine(cut.leftOut, {
      headBytes: shape.head * shape.segmentBytes,
      tailBytes: keptBytes,
    });
    const pieces: Buffer[] = [Buffer.from(line)];
    if (cut.before && cut.suffix > 0)
      pieces.push((await readSegment(store, cut.before.key)).subarray(-cut.suffix));
    const [first, ...rest] = cut.kept;
    if (first) pieces.push(await readSegment(store, first.key));
    sources.push({ bytes: Buffer.concat(pieces) }, ...rest.map(({ key }) => ({ key })));
  }
  const leftOut = cut.leftOut;
  if (sources.length === 0) await store.putObject(logKey, Buffer.alloc(0), "text/plain");
  else await store.composeObject(logKey, sources, "text/plain");
  const { bytes, sha256 } = await digestOf(store, logKey);
  await store.deletePrefix(uploadSegmentsPrefix(logKey), { uploads: false });
  return { bytes, sha256, leftOut, received: index?.bytes ?? bytes, index, short };
}

interface Present {
  n: number;
  key: string;
  bytes: number;
}

/**
 * Which tail segments the object keeps: the newest that fit in the cap's tail, and the end of the
 * one before them to fill it; the bytes before that are left out (the tail's segments, each full
 * but the last, all counted though some slots were used again since).
 */
export function tailCut(
  tail: readonly Present[],
  shape: UploadShape,
): { kept: Present[]; before: Present | undefined; suffix: number; leftOut: number } {
  const last = tail.at(-1);
  if (!last) return { kept: [], before: undefined, suffix: 0, leftOut: 0 };
  const total = (last.n - shape.head) * shape.segmentBytes + last.bytes;
  if (total <= shape.tailBytes && tail[0]?.n === shape.head)
    return { kept: [...tail], before: undefined, suffix: 0, leftOut: 0 };
  const kept: Present[] = [];
  let bytes = 0;
  let i = tail.length - 1;
  for (; i >= 0; i--) {
    const segment = tail[i] as Present;
    if (bytes + segment.bytes > shape.tailBytes) break;
    kept.unshift(segment);
    bytes += segment.bytes;
  }
  const before = i >= 0 ? tail[i] : undefined;
  const suffix = before ? Math.min(before.bytes, shape.tailBytes - bytes) : 0;
  return { kept, before, suffix, leftOut: total - bytes - suffix };
}

async function readSegment(store: ArchiveStore, key: string): Promise<Buffer> {
  const bytes = await store.readBytes(key);
  if (bytes === undefined) throw new Error(`${key} went from the store while its attempt was composed`);
  return bytes;
}

async function digestOf(store: ArchiveStore, key: string): Promise<{ bytes: number; sha256: string }> {
  const object = await store.getObject(key);
  if (!object) throw new Error(`${key} is not in the store after it was composed`);
  const hash = createHash("sha256");
  let bytes = 0;
  for await (const chunk of object.body) {
    hash.update(chunk as Uint8Array);
    bytes += (chunk as Uint8Array).length;
  }
  return { bytes, sha256: hash.digest("hex") };
}
