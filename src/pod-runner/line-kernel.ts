// The line prefixing of large chunks in WebAssembly with SIMD (line-kernel.wat): one copy of the
// chunk in, one of the result out, and the search for line ends and the per-line copies inside the
// module. At 100-byte lines the JS path's Buffer#indexOf and copyWithin per line cost about a
// second a GiB in calls alone. Compiled on the first large chunk, so a run with little output
// never pays for it; where WebAssembly or its SIMD is missing, LinePrefixer keeps its JS path.
import { LINE_KERNEL_WASM_BASE64 } from "./line-kernel-module.js";

/** Chunks shorter than this stay on the JS path: the two copies would cost more than they save. */
export const KERNEL_MIN_CHUNK = 256;
// The module's memory: the prefix, then the chunk, then the result, each with 16 bytes of slack
// for the kernel's 16-byte copies. It grows to what a chunk needs, up to this; a chunk that would
// need more (a huge chunk of tiny lines under a long prefix) takes the JS path.
const PREFIX_AREA = 4096;
const SLACK = 16;
const MAX_MEMORY = 4 * 1024 * 1024;
const PAGE = 64 * 1024;

/** What of the WebAssembly global this needs (the project's TypeScript libs do not declare it). */
interface WebAssemblyApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object) => { exports: unknown };
}

interface Kernel {
  memory: { buffer: ArrayBuffer; grow(pages: number): number };
  prefix(input: number, length: number, output: number, prefix: number, size: number, starts: number): number;
}

let kernel: Kernel | null | undefined;

function loaded(): Kernel | null {
  if (kernel !== undefined) return kernel;
  const wasm = (globalThis as { WebAssembly?: WebAssemblyApi }).WebAssembly;
  try {
    if (!wasm) throw new Error("no WebAssembly");
    const module = new wasm.Module(Buffer.from(LINE_KERNEL_WASM_BASE64, "base64"));
    kernel = new wasm.Instance(module).exports as Kernel;
  } catch {
    // No WebAssembly or no SIMD here (a runtime built without them): the JS path does it all.
    kernel = null;
  }
  return kernel;
}

const align = (at: number) => (at + 15) & ~15;

/**
 * `chunk` with `prefix` before each line (before its first only when `starts`), in a buffer from
 * `allocate`; undefined when the kernel cannot take it (too small or too large a chunk, too long a
 * prefix, no kernel here), for the JS path to do.
 */
export function kernelPrefixed(
  chunk: Buffer,
  prefix: Buffer,
  starts: boolean,
  allocate: (size: number) => Buffer,
): Buffer | undefined {
  const length = chunk.length;
  const size = prefix.length;
  if (length < KERNEL_MIN_CHUNK || size > PREFIX_AREA - SLACK) return undefined;
  const input = PREFIX_AREA;
  const output = align(input + length + SLACK);
  // At most: every byte a line end, each line behind a prefix, and the open line after them.
  const needed = output + length + (length + 1) * size + SLACK;
  if (needed > MAX_MEMORY) return undefined;
  const k = loaded();
  if (k === null) return undefined;
  const have = k.memory.buffer.byteLength;
  if (needed > have) k.memory.grow(Math.ceil((needed - have) / PAGE));
  const memory = new Uint8Array(k.memory.buffer);
  memory.set(prefix, 0);
  memory.set(chunk, input);
  const written = k.prefix(input, length, output, 0, size, starts ? 1 : 0);
  const out = allocate(written);
  out.set(memory.subarray(output, output + written));
  return out;
}
