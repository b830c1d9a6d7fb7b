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

  it("passes chunks through untouched without a prefix", () => {
    const chunk = Buffer.from([0xff, 0x0a, 0x00]);
    expect(new LinePrefixer("").push(chunk)).toBe(chunk);
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
