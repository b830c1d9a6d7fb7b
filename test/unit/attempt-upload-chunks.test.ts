// The archive's upload holds the bytes of a followed log, not the reads they came in: a chunk of
// the stream is a slice of a larger read (a TLS record's buffer), and a part (8 MiB) held as
// thousands of slices kept every one of those reads alive until it was uploaded. Below a part no
// store is called, so the store here is never reached.
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import type { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { AttemptUpload } from "../../src/controller/log-archive/attempt-upload.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const unreachable = new Proxy({} as ArchiveStore, {
  get: (_target, name) => {
    throw new Error(`the store was called (${String(name)}) below a part`);
  },
});

/** `count` 106-byte lines, each a slice of a 16 KiB read of its own; weak references to the reads. */
async function feed(upload: AttemptUpload, count: number): Promise<WeakRef<ArrayBuffer>[]> {
  const reads: WeakRef<ArrayBuffer>[] = [];
  for (let i = 0; i < count; i++) {
    const read = Buffer.alloc(16 * 1024, i % 256);
    reads.push(new WeakRef(read.buffer));
    await upload.write(read.subarray(0, 106));
  }
  return reads;
}

describe("an attempt's upload", () => {
  it("keeps no stream read alive for the small chunk it took from it", async () => {
    const upload = new AttemptUpload({
      store: unreachable,
      key: "ns/run/uid/attempt-1.log",
      capBytes: 1 << 30,
    });
    const reads = await feed(upload, 200);
    // WeakRefs are cleared after the job that collected them: a turn of the event loop.
    gc();
    await new Promise((resolve) => setTimeout(resolve, 0));
    gc();
    expect(upload.receivedBytes).toBe(200 * 106);
    expect(reads.filter((ref) => ref.deref() !== undefined).length).toBe(0);
  });
});
