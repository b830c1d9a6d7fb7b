import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type AgentFrame,
  AgentWireError,
  decodeAgentFrame,
  decodeRunnerFrame,
  encodeAgentFrame,
  encodeRunnerFrame,
  FrameReader,
  MAX_PAYLOAD,
  type RunnerFrame,
} from "../../src/pod-runner/agent-wire.js";

const bytes = (text: string) => Buffer.from(text, "latin1");

function roundTripRunner(frame: RunnerFrame): RunnerFrame {
  const [decoded] = new FrameReader().push(encodeRunnerFrame(frame));
  if (!decoded) throw new Error("no frame");
  return decodeRunnerFrame(...decoded);
}

/** Read sizes for the splitting properties: 1 byte to 20,000, cycled. */
const readSizes = fc.array(fc.integer({ min: 1, max: 20_000 }), { minLength: 1, maxLength: 12 });

/**
 * `wire` pushed through a FrameReader in reads of `sizes` (cycled), each read's frames decoded.
 * With `asSocketReads` each read is a buffer of its own, as a socket's is, and released once
 * its frames are decoded, as the hub does.
 */
function readInPieces(wire: Buffer, sizes: number[], options: { asSocketReads?: boolean } = {}) {
  const reader = new FrameReader();
  const decoded: AgentFrame[] = [];
  const reads: Buffer[] = [];
  let at = 0;
  for (let i = 0; at < wire.length; i++) {
    const size = sizes[i % sizes.length] ?? 1;
    const slice = wire.subarray(at, at + size);
    const read = options.asSocketReads
      ? Buffer.from(slice.buffer.slice(slice.byteOffset, slice.byteOffset + slice.length))
      : slice;
    reads.push(read);
    for (const frame of reader.push(read)) decoded.push(decodeAgentFrame(...frame));
    if (options.asSocketReads) reader.release();
    at += size;
  }
  return { reader, decoded, reads };
}

describe("agent wire: the bytes of the contract", () => {
  it.each<[string, RunnerFrame, string]>([
    [
      "start",
      { type: "start", id: 7, cwd: "/workspace", run: "echo hi", shell: [], env: { A: "1", B: "x=y" } },
      "S\0\0\0\x1f7\0/workspace\0echo hi\0\0A=1\0B=x=y",
    ],
    [
      "start with the task's shell (its words joined by spaces)",
      { type: "start", id: 7, cwd: "/w", run: "false | true", shell: ["bash", "-eo", "pipefail"], env: {} },
      "S\0\0\0\x237\0/w\0false | true\0bash -eo pipefail",
    ],
    ["kill of a group", { type: "kill", target: -42, signal: "SIGTERM" }, "K\0\0\0\x0b-42\0SIGTERM"],
    ["kill of the tree", { type: "kill", target: "tree", signal: "SIGKILL" }, "K\0\0\0\x0ctree\0SIGKILL"],
    ["fence", { type: "fence", spare: [1, 23] }, "Z\0\0\0\x041\x0023"],
    ["quit", { type: "quit" }, "Q\0\0\0\0"],
    ["the proof's nonce", { type: "prove", nonce: "aZ09aZ09aZ09aZ0" }, "N\0\0\0\x0faZ09aZ09aZ09aZ0"],
    ["welcome", { type: "welcome" }, "W\0\0\0\0"],
  ])("encodes %s", (_name, frame, wire) => {
    expect(encodeRunnerFrame(frame).toString("latin1")).toBe(wire);
    expect(roundTripRunner(frame)).toEqual(frame);
  });

  it.each<[string, string, AgentFrame]>([
    [
      "hello",
      "H\0\0\0\x16task-1\x0012\x001000\0/bin/sh",
      { type: "hello", container: "task-1", pid: 12, uid: 1000, shell: "/bin/sh", env: {} },
    ],
    [
      "hello with the agent's environment (a value may hold '=')",
      "H\0\0\0\x2atask-1\x0012\x001000\0/bin/sh\0PATH=/usr/bin\0A=b=c",
      {
        type: "hello",
        container: "task-1",
        pid: 12,
        uid: 1000,
        shell: "/bin/sh",
        env: { PATH: "/usr/bin", A: "b=c" },
      },
    ],
    ["started", "P\0\0\0\x047\x0099", { type: "started", id: 7, pid: 99 }],
    ["stdout", "O\0\0\0\x06\0\0\0\x07a\n", { type: "stdout", id: 7, data: bytes("a\n") }],
    ["stderr", "E\0\0\0\x05\0\0\x01\0\xff", { type: "stderr", id: 256, data: bytes("\xff") }],
    ["closed", "C\0\0\0\x057\0err", { type: "closed", id: 7, stream: "err" }],
    ["exit code", "X\0\0\0\x047\x003\0", { type: "exited", id: 7, code: 3, signal: null }],
    ["signal", "X\0\0\0\x0a7\0\0SIGKILL", { type: "exited", id: 7, code: null, signal: "SIGKILL" }],
    [
      "exit with its rusage (CPU µs, peak RSS KiB)",
      "X\0\0\0\x137\x000\0\x001020000\x00205000",
      { type: "exited", id: 7, code: 0, signal: null, usage: { cpuMicros: 1_020_000, maxRssKiB: 205_000 } },
    ],
    ["fenced", "F\0\0\0\x010", { type: "fenced", alive: 0 }],
    ["error of a task", "R\0\0\0\x0e7\0chdir /x: no", { type: "error", id: 7, text: "chdir /x: no" }],
    ["error of no task", "R\0\0\0\x08\0refused", { type: "error", id: null, text: "refused" }],
    ["the proof's answer", "N\0\0\0\0", { type: "named" }],
  ])("decodes %s", (_name, wire, frame) => {
    const [decoded] = new FrameReader().push(bytes(wire));
    if (!decoded) throw new Error("no frame");
    expect(decodeAgentFrame(...decoded)).toEqual(frame);
    expect(encodeAgentFrame(frame).toString("latin1")).toBe(wire);
  });

  it.each([
    ["a CPU time that is no number", "7\x00\x00\x00-1\x00100", "cpu µs"],
    ["a CPU time over ten years of 1024 cores", `7\x00\x00\x00${"9".repeat(20)}\x00100`, "cpu µs over"],
    ["a peak over 1 PiB", `7\x00\x00\x00100\x00${2 ** 40 + 1}`, "maxrss KiB over"],
    ["a CPU time without its peak", "7\x00\x00\x00100", "4 fields"],
  ])("refuses an exit frame with %s, naming the field", (_name, payload, said) => {
    expect(() => decodeAgentFrame("X", bytes(payload))).toThrow(AgentWireError);
    expect(() => decodeAgentFrame("X", bytes(payload))).toThrow(said);
  });

  it("cuts frames out of chunks split and joined anywhere", () => {
    const frames: AgentFrame[] = [
      { type: "started", id: 1, pid: 10 },
      { type: "stdout", id: 1, data: Buffer.alloc(70_000, 0x61) },
      { type: "closed", id: 1, stream: "out" },
      { type: "exited", id: 1, code: 0, signal: null },
    ];
    const wire = Buffer.concat(frames.map(encodeAgentFrame));
    fc.assert(
      fc.property(readSizes, (sizes) => {
        const { reader, decoded } = readInPieces(wire, sizes);
        // Compared as bytes: a deep equality over 70,000 buffer elements per run is slow.
        expect(Buffer.concat(decoded.map(encodeAgentFrame)).equals(wire)).toBe(true);
        expect(reader.buffered).toBe(0);
      }),
      { numRuns: 50 },
    );
  });

  it("frees each read once its frames are taken, but for what holds an unfinished frame", () => {
    const frames: AgentFrame[] = [
      { type: "stdout", id: 1, data: Buffer.alloc(70_000, 0x61) },
      { type: "stderr", id: 1, data: Buffer.alloc(9_000, 0x62) },
      { type: "closed", id: 1, stream: "out" },
      { type: "exited", id: 1, code: 0, signal: null },
    ];
    const wire = Buffer.concat(frames.map(encodeAgentFrame));
    fc.assert(
      fc.property(readSizes, (sizes) => {
        const { decoded, reads } = readInPieces(wire, sizes, { asSocketReads: true });
        expect(Buffer.concat(decoded.map(encodeAgentFrame)).equals(wire)).toBe(true);
        // All frames are in: every read is freed (a freed buffer reads as empty).
        expect(reads.filter((read) => read.buffer.byteLength > 0)).toEqual([]);
      }),
      // A byte at a time always among them: 79,000 reads, each released, must stay linear.
      { numRuns: 50, examples: [[[1]]] },
    );
  });

  it("refuses a frame over 1 MiB before it arrives whole", () => {
    const head = Buffer.from([0x4f, 0, 0x10, 0, 1]);
    expect(() => new FrameReader().push(head)).toThrow(AgentWireError);
    expect(() => encodeAgentFrame({ type: "stdout", id: 1, data: Buffer.alloc(MAX_PAYLOAD) })).toThrow(
      /over the limit/,
    );
  });

  it.each<[string, string, RegExp]>([
    ["an unknown type", "?", /unknown agent frame type/],
    ["a hello without a shell", "H:task-1\x001\x001000", /bad hello frame/],
    ["a pid that is not a number", "P:1\0x", /bad started frame/],
    ["a stream other than out and err", "C:1\0both", /bad closed frame/],
    ["an output frame without its id", "O:\0\0", /no task id/],
    ["a proof's answer with a payload", "N:x", /named frame of 1 bytes is not empty/],
  ])("refuses %s", (_name, frame, message) => {
    const [code = "", payload = ""] = frame.split(/:(.*)/s);
    expect(() => decodeAgentFrame(code, bytes(payload))).toThrow(message);
  });

  it.each(["", "a-b", "sixteen-letters!", "abcdefghijklmnop"])(
    "refuses %j as a nonce, which the agent takes as its process name (at most 15 letters and digits)",
    (nonce) => {
      expect(() => encodeRunnerFrame({ type: "prove", nonce })).toThrow(/bad nonce/);
      expect(() => decodeRunnerFrame("N", bytes(nonce))).toThrow(/bad nonce/);
    },
  );

  it("refuses a field that holds a NUL and an env name with =", () => {
    expect(() =>
      encodeRunnerFrame({ type: "start", id: 1, cwd: "/", run: "a\0b", shell: [], env: {} }),
    ).toThrow(/NUL/);
    expect(() =>
      encodeRunnerFrame({ type: "start", id: 1, cwd: "/", run: "", shell: [], env: { "A=B": "1" } }),
    ).toThrow(/env name/);
    expect(() =>
      encodeRunnerFrame({ type: "start", id: 1, cwd: "/", run: "", shell: ["bash -e"], env: {} }),
    ).toThrow(/bad shell word/);
  });
});
