// The live line `playbook run` draws on a terminal while a task runs: the CLI under a real
// pseudo-terminal (util-linux `script`), as a user at a terminal sees it.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
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

function runOnPipes(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, [MARKER_VAR]: currentMarker() },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, stderr })));
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
});
