// The open line at a shared target (src/pod-runner/task-lines.ts): task chunks from their
// prefixers and the runner's own lines, in the order they are written there.
import { describe, expect, it } from "vitest";
import { LinePrefixer } from "../../src/pod-runner/output.js";
import { TaskLines } from "../../src/pod-runner/task-lines.js";

/** Writes each step to one target through TaskLines; what the target holds. */
function target(steps: ((lines: TaskLines) => Buffer[])[], terminal = false): string {
  const lines = new TaskLines(terminal);
  return Buffer.concat(steps.flatMap((step) => step(lines))).toString();
}

describe("TaskLines", () => {
  it("ends a stream's open line before another's, and prefixes its rest again", () => {
    const out = new LinePrefixer("[p] ");
    const err = new LinePrefixer("[p] ");
    const written = target([
      (t) => t.task(out.push(Buffer.from("Downloading... "))),
      (t) => t.task(err.push(Buffer.from("warn\n"))),
      (t) => t.task(out.push(Buffer.from("done\n"))),
    ]);
    expect(written).toBe("[p] Downloading... \n[p] warn\n[p] done\n");
  });

  it("writes nothing for the closing newline of a line that was ended, and keeps a line it did not end whole", () => {
    const out = new LinePrefixer("[p] ");
    const err = new LinePrefixer("[p] ");
    const written = target([
      (t) => t.task(out.push(Buffer.from("10%"))),
      (t) => t.task(out.push(Buffer.from(" 20%"))),
      (t) => t.task(err.push(Buffer.from("warn"))),
      (t) => t.task(out.end() as Buffer),
      (t) => t.task(err.push(Buffer.from(" again\n"))),
      (t) => t.task(err.end() ?? Buffer.alloc(0)),
    ]);
    expect(written).toBe("[p] 10% 20%\n[p] warn again\n");
  });

  it("ends an open task line before the runner's own line, and only then", () => {
    const out = new LinePrefixer("[p] ");
    const written = target([
      (t) => [t.ownLine(), Buffer.from("playbook: begin\n")].filter((piece) => piece !== null),
      (t) => t.task(out.push(Buffer.from("Downloading... "))),
      (t) => [t.ownLine(), Buffer.from("playbook: received SIGINT\n")].filter((piece) => piece !== null),
      (t) => t.task(out.push(Buffer.from("done\n"))),
    ]);
    expect(written).toBe("playbook: begin\n[p] Downloading... \nplaybook: received SIGINT\n[p] done\n");
  });

  it("passes bytes no prefixer wrote as they are (a run without prefixes)", () => {
    const written = target([(t) => t.task(Buffer.from("raw ")), (t) => t.task(Buffer.from("bytes\n"))]);
    expect(written).toBe("raw bytes\n");
  });
});

describe("a progress bar drawn with \\r", () => {
  const bar = (terminal: boolean) => {
    const out = new LinePrefixer("[fetch] ");
    return target(
      [
        (t) => t.task(out.push(Buffer.from("\rdownloading   0% [    ]"))),
        (t) => t.task(out.push(Buffer.from("\rdownloading  50% [##  ]\rdownloading 100% [####]"))),
        (t) => t.task(out.push(Buffer.from("\r\ndone\r\n"))),
      ],
      terminal,
    );
  };

  it("carries the task's prefix after each redraw on a terminal", () => {
    expect(bar(true)).toBe(
      "[fetch] \r[fetch] downloading   0% [    ]\r[fetch] downloading  50% [##  ]\r[fetch] downloading 100% [####]\r\n[fetch] done\r\n",
    );
  });

  it("keeps one label per line in a pipe or a file, as it came", () => {
    expect(bar(false)).toBe(
      "[fetch] \rdownloading   0% [    ]\rdownloading  50% [##  ]\rdownloading 100% [####]\r\n[fetch] done\r\n",
    );
  });
});
