import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { kernelModuleSource } from "../../scripts/kernel-generate.js";
import { KERNEL_MIN_CHUNK, kernelPrefixed } from "../../src/pod-runner/line-kernel.js";
import { LinePrefixer, OutputTail } from "../../src/pod-runner/output.js";
import { repoRoot } from "../harness/binaries.js";

function prefixAll(chunks: string[], prefix = "[t] ", recycle = false): string {
  const prefixer = new LinePrefixer(prefix, recycle);
  const out = chunks.map((chunk) => prefixer.push(Buffer.from(chunk, "latin1")).toString("latin1")).join("");
  return out + (prefixer.end()?.toString("latin1") ?? "");
}

/** A seeded generator of whole numbers below `below`: the same cases on every run. */
function seeded(seed: number): (below: number) => number {
  return (below) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % below;
  };
}

/** `text` prefixed line by line, its open last line ended: what the prefixer must give. */
function referencePrefixed(text: string, prefix: string): string {
  const lines = text.split("\n");
  return (
    lines
      .slice(0, -1)
      .map((line) => `${prefix}${line}\n`)
      .join("") + (lines.at(-1) ? `${prefix}${lines.at(-1)}\n` : "")
  );
}

describe("line prefixes", () => {
  it.each([
    [["one\ntwo\n"], "[t] one\n[t] two\n"],
    [["on", "e\ntw", "o\n"], "[t] one\n[t] two\n"],
    [["no newline at all"], "[t] no newline at all\n"],
    [["a", "b", "c"], "[t] abc\n"],
    [["\n\n"], "[t] \n[t] \n"],
    [["x\n", "", "y"], "[t] x\n[t] y\n"],
  ])("prefixes %j at every line start, across chunk boundaries", (chunks, expected) => {
    expect(prefixAll(chunks)).toBe(expected);
  });

  it("matches a line-by-line reference for random bytes cut at random points", () => {
    // Lines of 0-40 bytes, with bytes of every value, in chunks of 0-300 bytes: the output is
    // built with in-place moves, so every offset between prefixes and lines is exercised.
    const random = seeded(42);
    for (let round = 0; round < 50; round++) {
      const bytes: number[] = [];
      while (bytes.length < 5000) {
        for (let n = random(41); n > 0; n--) bytes.push(random(256));
        bytes.push(10);
      }
      const text = Buffer.from(bytes.slice(0, 5000 - random(3))).toString("latin1");
      const chunks: string[] = [];
      for (let at = 0; at < text.length; ) {
        const size = random(301);
        chunks.push(text.slice(at, at + size));
        at += size;
      }
      expect(prefixAll(chunks)).toBe(referencePrefixed(text, "[t] "));
    }
  });

  it.each([
    ["[t] ", false],
    ["[a-much-longer-task-name-than-sixteen] ", true],
    [">", true],
  ])(
    "matches it too with prefix %j in chunks of up to 70,000 bytes (the SIMD kernel's), recycled: %s",
    (prefix, recycle) => {
      // Lines of 0 to 200 bytes and chunks across KERNEL_MIN_CHUNK and a pipe's 64 KiB, so line
      // ends fall at every offset of the kernel's 16-byte blocks and its tail.
      const random = seeded(7);
      for (let round = 0; round < 6; round++) {
        const bytes: number[] = [];
        while (bytes.length < 300_000) {
          for (let n = random(201); n > 0; n--) bytes.push(random(256) === 10 ? 11 : random(256));
          bytes.push(10);
        }
        const text = Buffer.from(bytes.slice(0, 300_000 - random(3))).toString("latin1");
        const chunks: string[] = [];
        for (let at = 0; at < text.length; ) {
          const size = random(2) === 0 ? random(KERNEL_MIN_CHUNK * 2) : random(70_001);
          chunks.push(text.slice(at, at + size));
          at += size;
        }
        expect(prefixAll(chunks, prefix, recycle) === referencePrefixed(text, prefix)).toBe(true);
      }
    },
  );

  it("takes chunks of KERNEL_MIN_CHUNK bytes and more through the kernel where WebAssembly runs", () => {
    const chunk = Buffer.from(`${"x".repeat(99)}\n`.repeat(10));
    const out = kernelPrefixed(chunk, Buffer.from("[t] "), true, (size) => Buffer.alloc(size));
    expect(out?.toString()).toBe(`[t] ${"x".repeat(99)}\n`.repeat(10));
    expect(
      kernelPrefixed(chunk.subarray(0, KERNEL_MIN_CHUNK - 1), Buffer.from("[t] "), true, Buffer.alloc),
    ).toBe(undefined);
  });

  it("leaves to the JS path a chunk whose worst case would grow the kernel's memory past 4 MiB", () => {
    const prefix = `[${"p".repeat(98)}] `;
    const chunk = Buffer.from(`${"x".repeat(99)}\n`.repeat(655));
    expect(kernelPrefixed(chunk, Buffer.from(prefix), true, Buffer.alloc)).toBe(undefined);
    expect(new LinePrefixer(prefix).push(chunk).toString()).toBe(`${prefix}${"x".repeat(99)}\n`.repeat(655));
  });

  it("runs the kernel that line-kernel.wat assembles to (npm run kernel:generate)", async () => {
    const checkedIn = readFileSync(
      path.join(repoRoot(), "src", "pod-runner", "line-kernel-module.ts"),
      "utf8",
    );
    expect(checkedIn).toBe(await kernelModuleSource());
  });

  it("passes chunks through untouched without a prefix", () => {
    const chunk = Buffer.from([0xff, 0x0a, 0x00]);
    expect(new LinePrefixer("").push(chunk)).toBe(chunk);
  });
});

describe("recycled output buffers", () => {
  it("are reused only once released, so output still held by a reader is never overwritten", () => {
    const prefixer = new LinePrefixer("[t] ", true);
    const held = prefixer.push(Buffer.from("one\ntwo\n"));
    const heldText = held.toString();
    const next = prefixer.push(Buffer.from("three\n"));
    expect(next.buffer).not.toBe(held.buffer);
    expect(held.toString()).toBe(heldText);
    prefixer.release(held);
    const reused = prefixer.push(Buffer.from("four\n"));
    expect(reused.buffer).toBe(held.buffer);
    expect(reused.toString()).toBe("[t] four\n");
    expect(next.toString()).toBe("[t] three\n");
  });

  it("are not taken back when they are not the prefixer's own", () => {
    const prefixer = new LinePrefixer("[t] ", true);
    const foreign = Buffer.from("x\n");
    prefixer.release(foreign);
    expect(prefixer.push(Buffer.from("y\n")).buffer).not.toBe(foreign.buffer);
  });
});

describe("the output tail", () => {
  it("keeps the last line of a long output within its byte limit", () => {
    const tail = new OutputTail(64);
    for (let i = 0; i < 1000; i++) tail.push(Buffer.from(`line ${i}\n`));
    tail.push(Buffer.from(`${"x".repeat(10_000)}\nfinal words\n`));
    expect(tail.lastLine()).toBe("final words");
  });

  it("tells of each chunk it lets go of, and of none it still needs", () => {
    const dropped: string[] = [];
    const tail = new OutputTail(8, (chunk) => dropped.push(chunk.toString()));
    for (const text of ["ab", "cd", "ef", "gh", "ij"]) tail.push(Buffer.from(text));
    expect(dropped).toEqual(["ab"]);
    tail.push(Buffer.from("the end\n"));
    expect(dropped).toEqual(["ab", "cd", "ef", "gh", "ij"]);
    expect(tail.lastLine()).toBe("the end");
  });
});
