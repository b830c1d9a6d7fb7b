// How an attempt's output is cut to maximums.archivedLogBytes: the head (whole parts, about
// half the cap) goes straight into the object's upload; what follows is kept as part-sized
// segments under a temporary key, the oldest deleted as soon as the newer ones alone hold the
// tail; at the end the one line that says how much was left out and the tail's last bytes are
// read back into the upload. Memory stays one part being filled and one in flight, whatever the
// cap. Pure arithmetic, shared by the uploader and its unit tests.

/** Every part but the last is this long (S3 wants at least 5 MiB). */
export const PART_BYTES = 8 * 1024 * 1024;

/** Room kept under the cap for the left-out line. */
export const LEFT_OUT_LINE_RESERVE = 256;

export interface CapPlan {
  /** Bytes kept from the start: whole parts, straight into the upload. */
  headBytes: number;
  /** Bytes kept from the end when the output passes the cap. */
  tailBytes: number;
}

/** The head and tail a cap keeps: the head half the cap in whole parts (at least one), the tail the rest. */
export function capPlan(capBytes: number, partBytes = PART_BYTES): CapPlan {
  const parts = Math.max(1, Math.floor(capBytes / 2 / partBytes));
  const headBytes = parts * partBytes;
  return { headBytes, tailBytes: Math.max(0, capBytes - headBytes - LEFT_OUT_LINE_RESERVE) };
}

/** The line that stands where output was left out; it starts a line of its own. */
export function leftOutLine(leftOut: number, plan: CapPlan): string {
  return `\n[playbook-controller: ${leftOut} bytes of output left out here; the archive keeps the first ${plan.headBytes} and the last ${plan.tailBytes} bytes (maximums.archivedLogBytes)]\n`;
}

/**
 * How many of the oldest tail segments can go while more arrive: those whose bytes all lie before
 * the last `tailBytes`, however the output ends (the bytes after them already reach the tail).
 * `segments` are the kept segments' lengths, oldest first; `pending` the bytes held in memory after them.
 */
export function segmentsOutOfWindow(segments: readonly number[], pending: number, tailBytes: number): number {
  let after = pending;
  for (const length of segments) after += length;
  let drop = 0;
  for (const length of segments) {
    after -= length;
    if (after < tailBytes) break;
    drop++;
  }
  return drop;
}

/**
 * Where the tail starts in the first kept segment, once the output has ended: its bytes before
 * that offset are left out. `total` counts the segments' bytes and those pending after them.
 */
export function tailSkip(total: number, tailBytes: number): number {
  return Math.max(0, total - tailBytes);
}
