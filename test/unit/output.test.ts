import { describe, expect, it } from "vitest";
import { LinePrefixer, OutputTail } from "../../src/pod-runner/output.js";

function prefixAll(chunks: string[]): string {
  const prefixer = new LinePrefixer("[t] ");
  const out = chunks.map((chunk) => prefixer.push(Buffer.from(chunk, "latin1")).toString("latin1")).join("");
  return out + (prefixer.end()?.toString("latin1") ?? "");
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
    let seed = 42;
    const random = (below: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % below;
    };
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
      const lines = text.split("\n");
      const reference =
        lines
          .slice(0, -1)
          .map((line) => `[t] ${line}\n`)
          .join("") + (lines.at(-1) ? `[t] ${lines.at(-1)}\n` : "");
      expect(prefixAll(chunks)).toBe(reference);
    }
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
});
