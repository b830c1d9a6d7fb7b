// Control characters as escapes (src/api/visible-text.ts), and the runner's progress lines that
// quote text through it (src/cli/progress.ts): one line each, whatever the text says, plain or
// on a terminal, where the only control bytes are the line's own styles.
import { PassThrough } from "node:stream";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { setCondition } from "../../src/api/conditions.js";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { expandReport } from "../../src/api/report-expand.js";
import { escapeControls, hasControls } from "../../src/api/visible-text.js";
import { Progress } from "../../src/cli/progress.js";

describe("escapeControls", () => {
  it.each([
    ["a newline and a carriage return", "a\nb\r", "a\\nb\\r"],
    ["a tab", "a\tb", "a\\tb"],
    ["an ESC", "\x1b[31mred", "\\x1b[31mred"],
    ["NUL and DEL", "\0\x7f", "\\x00\\x7f"],
    ["C1 (NEL, CSI)", "\x85\x9b", "\\u0085\\u009b"],
    ["the line and paragraph separators", "a\u2028b\u2029", "a\\u2028b\\u2029"],
    ["text without any, as it is", "ünïcödé ✓ 😀 \\n", "ünïcödé ✓ 😀 \\n"],
  ])("shows %s as escapes", (_name, text, shown) => {
    expect(escapeControls(text)).toBe(shown);
  });

  it("leaves no control character, and escaping twice changes nothing more", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 200 }), (text) => {
        const once = escapeControls(text);
        expect(hasControls(once)).toBe(false);
        expect(once.includes("\n")).toBe(false);
        expect(escapeControls(once)).toBe(once);
      }),
    );
  });
});

describe("progress lines quote text escaped", () => {
  const spec = PlaybookSpecSchema.parse({ tasks: [{ name: "build", run: "make" }] });
  const limits = resolveLimits(spec, LOCAL_DEFAULTS);
  const EVIL = `x\nplaybook.dev/progress {"seq":9}\r\x1b[2J\u2028y`;

  const render = (tty: boolean): string => {
    const out = new PassThrough();
    let text = "";
    out.on("data", (chunk: Buffer) => {
      text += chunk.toString();
    });
    const progress = new Progress({ out, tty, limits, outputBytes: () => 0, where: [`in ${EVIL}`] });
    progress.begin(EVIL, 1);
    progress.event({ type: "containment", description: EVIL, notices: [EVIL] } as never);
    progress.event({
      type: "task-started",
      index: 0,
      name: "build",
      attempt: 1,
      limits: limits.tasks[0] as never,
    });
    progress.say(`playbook: ${EVIL}`);
    progress.event({
      type: "task-finished",
      index: 0,
      outcome: { name: "build", phase: "Failed", attempts: 1, exitCode: 1, signal: EVIL },
    });
    progress.event({ type: "leftovers-swept", found: 1, ended: 0, warnings: [EVIL] });
    progress.end(
      {
        phase: "Failed",
        reason: "TaskFailed",
        startTime: new Date(),
        completionTime: new Date(),
        tasks: [{ name: "build", phase: "Failed", attempts: 1, exitCode: 1, signal: null }],
      },
      EVIL,
    );
    progress.stop();
    return text;
  };

  it("plain: each of its 9 lines stays one line, with no control character in it", () => {
    const lines = render(false).split("\n");
    expect(lines.pop()).toBe("");
    expect(lines).toHaveLength(9);
    for (const line of lines) {
      expect(line.startsWith("playbook: "), line).toBe(true);
      expect(hasControls(line), line).toBe(false);
    }
    expect(lines.at(-1)).toBe(`playbook: run Failed (TaskFailed): ${escapeControls(EVIL)}`);
  });

  it("on a terminal: the only control bytes are its own styles and cursor moves", () => {
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the terminal's own sequences are what it removes
    const own = /\x1b\[(?:[0-9;]*m|1A|K)|\r(?=\x1b\[K)|\n/g;
    const text = render(true);
    expect(hasControls(text.replace(own, ""))).toBe(false);
    expect(text).toContain(escapeControls(EVIL));
  });
});

describe("status messages quote text escaped", () => {
  it("a condition keeps its message with control characters as escapes", () => {
    const [condition] = setCondition(
      [],
      { type: "Succeeded", status: "False", reason: "TaskFailed", message: "task a: x\n\x1b[31my" },
      new Date(0),
    );
    expect(condition?.message).toBe("task a: x\\n\\x1b[31my");
  });

  it("a report's task message, and the run's, carry none (an older runner's report, a kubelet's words)", () => {
    const spec = PlaybookSpecSchema.parse({ tasks: [{ name: "a", run: "false" }] });
    const limits = resolveLimits(spec, LOCAL_DEFAULTS);
    const expanded = expandReport(
      {
        v: 1,
        phase: "Failed",
        reason: "TaskFailed",
        start: "2026-01-01T00:00:00Z",
        end: "2026-01-01T00:00:01Z",
        tasks: [{ p: "Failed", x: 1, m: "last\r\n\x1b]0;title\x07" }],
      },
      limits,
    );
    expect(expanded.tasks[0]?.message).toBe("exited with code 1: last\\r\\n\\x1b]0;title\\x07");
    expect(expanded.message).toBe("task a exited with code 1: last\\r\\n\\x1b]0;title\\x07");
  });
});
