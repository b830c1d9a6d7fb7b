// The live line `playbook run` draws on a terminal while a task runs: the CLI under a real
// pseudo-terminal (util-linux `script`), as a user at a terminal sees it.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

const CLI = join(import.meta.dirname, "../../dist/src/cli/main.js");

const currentMarker = checkNothingLeftBehind();

function manifest(spec: object): string {
  const file = join(mkdtempSync(join(tmpdir(), "live-")), "playbook.yaml");
  writeFileSync(
    file,
    stringify({ apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name: "live" }, spec }),
  );
  return file;
}

function quote(word: string): string {
  return `'${word.replaceAll("'", "'\\''")}'`;
}

/** Runs the CLI with stdout and stderr on a pseudo-terminal; resolves with everything it drew. */
function runOnTerminal(args: string[]): Promise<{ code: number | null; screen: string }> {
  const command = [process.execPath, CLI, ...args].map(quote).join(" ");
  const child = spawn("script", ["-qfec", command, "/dev/null"], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, TERM: "xterm", [MARKER_VAR]: currentMarker() },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let screen = "";
  child.stdout.on("data", (chunk: Buffer) => {
    screen += chunk.toString();
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, screen })));
}

function runOnPipes(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, [MARKER_VAR]: currentMarker() },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
}

const LIVE = /quiet: (\d+)s of 1m timeout · stall in (\S+) · ceiling (\S+) left/;
const ESC = "\x1b";

describe("the live line on a terminal", () => {
  it("is redrawn every second below the output of a silent task, with its clock against each limit", async () => {
    const file = manifest({
      ceiling: "10m",
      stall: "2m",
      tasks: [{ name: "quiet", run: "echo before the silence; sleep 4", timeout: "1m" }],
    });
    const { code, screen } = await runOnTerminal(["run", "-f", file]);
    expect(code).toBe(0);
    const draws = [...screen.matchAll(new RegExp(LIVE, "g"))];
    // Every whole second of the silence is shown: a redraw at least once a second.
    const seconds = new Set(draws.map((draw) => Number(draw[1])));
    for (const second of [1, 2, 3]) expect(seconds).toContain(second);
    expect(draws.some((draw) => /^1m5\ds$/.test(draw[2] ?? ""))).toBe(true);
    expect(draws.some((draw) => /^9m5\ds$/.test(draw[3] ?? ""))).toBe(true);
    // The task's own line is left whole: the live line is drawn after it, never over it.
    expect(screen).toContain("[quiet] before the silence\r\n");
    // Each redraw first clears the line it replaces, and the line is gone once the task ends.
    expect(screen).toContain(`left${ESC}[0m\r${ESC}[K  ${ESC}[2mquiet: `);
    const finished = screen.indexOf(`${ESC}[32m✓${ESC}[0m quiet  Succeeded`);
    expect(finished).toBeGreaterThan(0);
    expect(screen.slice(0, finished).endsWith(`\r${ESC}[K`)).toBe(true);
    expect(screen.slice(finished)).not.toMatch(LIVE);
  });

  it("makes way for a flood of output without redrawing per chunk, and every line arrives whole", async () => {
    const file = manifest({
      // One write per line, so the output comes in many small chunks.
      tasks: [
        {
          name: "loud",
          run: "awk 'BEGIN { for (i = 1; i <= 100000; i++) { print i; fflush() } }'; sleep 1.2",
          timeout: "1m",
        },
      ],
    });
    const started = Date.now();
    const { code, screen } = await runOnTerminal(["run", "-f", file]);
    const seconds = (Date.now() - started) / 1000;
    expect(code).toBe(0);
    // What stays on the screen of each line: what follows the last clear of it.
    const lines = screen
      .split("\r\n")
      .map((line) => {
        const cleared = line.lastIndexOf(`${ESC}[K`);
        return cleared === -1 ? line : line.slice(cleared + `${ESC}[K`.length);
      })
      .filter((line) => line.startsWith("[loud] "));
    expect(lines).toHaveLength(100_000);
    expect(lines.at(-1)).toBe("[loud] 100000");
    // Redraws are bounded by time (10 a second after output, 2 a second while silent), not by output.
    const draws = screen.split("loud: ").length - 1;
    expect(draws).toBeGreaterThan(0);
    expect(draws).toBeLessThanOrEqual(Math.ceil(seconds * 12) + 4);
  });

  it("is not drawn when stderr is not a terminal: plain lines as before", async () => {
    const file = manifest({ tasks: [{ name: "quiet", run: "sleep 1.2", timeout: "1m" }] });
    const { code, stderr } = await runOnPipes(["run", "-f", file]);
    expect(code).toBe(0);
    expect(stderr).toContain("playbook: task quiet started (timeout 1m (task)");
    expect(stderr).not.toMatch(LIVE);
    expect(stderr).not.toContain(`${ESC}[`);
  });

  describe("a task that draws a progress bar with \\r", () => {
    // Three redraws of one line, then a line of its own.
    const bar = () =>
      manifest({
        tasks: [
          {
            name: "fetch",
            run: "for i in 0 50 100; do printf '\\rdownloading %3d%% [%s]' $i $i; done; echo; echo done",
            timeout: "1m",
          },
        ],
      });

    it("carries the task's label after each redraw on a terminal", async () => {
      const { code, screen } = await runOnTerminal(["run", "-f", bar()]);
      expect(code).toBe(0);
      for (const percent of ["  0", " 50", "100"]) {
        expect(screen).toContain(`\r[fetch] downloading ${percent}% [${percent.trim()}]`);
      }
      // No redraw without its label: every carriage return that is no line end is followed by it.
      const redraws = screen.split("\r").slice(1);
      const unlabelled = redraws.filter((rest) => !/^(\n|\[fetch\] )/.test(rest) && !rest.startsWith(ESC));
      expect(unlabelled).toEqual([]);
      expect(screen).toContain("[fetch] done\r\n");
    });

    it("keeps one label per line in a pipe, as the bytes came", async () => {
      const { code, stdout } = await runOnPipes(["run", "-f", bar()]);
      expect(code).toBe(0);
      expect(stdout).toBe(
        "[fetch] \rdownloading   0% [0]\rdownloading  50% [50]\rdownloading 100% [100]\n[fetch] done\n",
      );
    });
  });

  it("shows what the README's sample output shows, line for line", async () => {
    const readme = readFileSync(join(import.meta.dirname, "../../README.md"), "utf8");
    const sample = /On a terminal the run shows[\s\S]*?```text\n([\s\S]*?)```/.exec(readme)?.[1];
    if (sample === undefined)
      throw new Error("README.md: no sample output after 'On a terminal the run shows'");
    // Its first two lines are each one line, wrapped there.
    const wrapped = sample.trimEnd().split("\n");
    const shown = [`${wrapped[0]} ${wrapped[1]}`, `${wrapped[2]} ${wrapped[3]}`, ...wrapped.slice(4)];
    const { code, screen } = await runOnTerminal([
      "run",
      "-f",
      join(import.meta.dirname, "../../examples/hello.yaml"),
    ]);
    expect(code).toBe(0);
    // What stays on the screen of each line: what follows its last clear, without the styles.
    const lines = screen
      .split("\r\n")
      .map((line) => {
        const cleared = line.lastIndexOf(`${ESC}[K`);
        return cleared === -1 ? line : line.slice(cleared + `${ESC}[K`.length);
      })
      .map((line) => line.replaceAll(new RegExp(`${ESC}\\[[0-9;]*m`, "g"), ""))
      .filter((line) => line !== "")
      // What the run cleaned up after an earlier one on this machine, said only when there was one.
      .filter((line) => !/^playbook: (removed )?the cgroup of an earlier run/.test(line));
    // Times, CPU and memory vary from run to run, and what contains the run from machine to machine.
    // A task that ends before the first sample of its memory (some ms, on a busy machine) shows no peak.
    const same = (line: string) =>
      line
        .replace(/in \d+(\.\d+)?m?s \(cpu \d+\.\d\ds(, peak \d+ [KMG]iB)?\)/, "in T (cpu C, peak P)")
        .replace(/^playbook: containment: .*/, "playbook: containment: ...");
    expect(lines.map(same)).toEqual(shown.map(same));
  });
});
