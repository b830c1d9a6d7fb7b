// The runner's kept-open kernel files (src/pod-runner/kept-file.ts): read again from the start each
// time, so a file whose text changed in place shows its new text; and the field parser.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { fieldIn, readKept } from "../../src/pod-runner/kept-file.js";

const dir = mkdtempSync(path.join(tmpdir(), "kept-file-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("a kept file", () => {
  it("shows what the file holds now at every read, longer or shorter than before", () => {
    const file = path.join(dir, "memory.events");
    writeFileSync(file, "oom 0\noom_kill 0\n");
    expect(fieldIn(readKept(file) ?? "", "oom_kill")).toBe(0);
    writeFileSync(file, `low 0\n${"x".repeat(9000)}\noom_kill 3\n`);
    expect(fieldIn(readKept(file) ?? "", "oom_kill")).toBe(3);
    writeFileSync(file, "oom_kill 7\n");
    expect(readKept(file)).toBe("oom_kill 7\n");
  });

  it("renders /proc/self/stat anew: this process's own pid each time", () => {
    const first = readKept("/proc/self/stat");
    expect(first?.startsWith(`${process.pid} (`)).toBe(true);
    expect(readKept("/proc/self/stat")?.startsWith(`${process.pid} (`)).toBe(true);
  });

  it("is null for a file that cannot be opened", () => {
    expect(readKept(path.join(dir, "absent"))).toBeNull();
  });
});

describe("fieldIn", () => {
  it("takes the number of the line that starts with the name, and only that name", () => {
    const text = "oom 1\noom_group_kill 9\noom_kill 2\n";
    expect(fieldIn(text, "oom")).toBe(1);
    expect(fieldIn(text, "oom_kill")).toBe(2);
    expect(fieldIn("oom_kill 5", "oom_kill")).toBe(5);
    expect(fieldIn(text, "max")).toBeNull();
    expect(fieldIn("oom_kill x\n", "oom_kill")).toBeNull();
  });
});
