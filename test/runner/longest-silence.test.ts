// Each task's longest silence (the longest time between two pieces of its output, from its start
// to its end), as `playbook run -o json` and `--report` give it: what `playbook advise` proposes
// a stall limit from. The built CLI in a real process, real shells and real sleeps.
//
// No bound here rests on how soon a timer fires or a pipe is read: a loaded machine makes every
// read late. The tasks wait, at each edge of a silence, until this test has seen their last line
// on the CLI's output (the runner takes a chunk's time before it passes the chunk on), and the
// bounds are built from the times this test took around those events.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { parseDuration } from "../../src/api/duration.js";
import { startCli } from "../support/cli.js";
import { checkNothingLeftBehind, MARKER_VAR } from "../support/runner.js";

const currentMarker = checkNothingLeftBehind();
const dir = mkdtempSync(join(tmpdir(), "silence-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Row {
  name: string;
  phase: string;
  limit?: string;
  longestSilence?: string;
  startTime?: string;
  completionTime?: string;
}

/** Waits, in a task's shell, for this test to create the file `$D/NAME`. */
const waitFor = (name: string) => `while [ ! -e "$D/${name}" ]; do sleep 0.01; done`;

/** The chatty task's lines, each printed once the test has seen the one before. */
const CHATTY_LINES = 10;

describe("a task's longest silence, locally", () => {
  let tasks: Row[] = [];
  let reported: { ls?: number }[] = [];
  let code: number | null = null;
  let stderr = "";
  /** When this test saw each line on the CLI's output, and when it let each task go on. */
  const seen = new Map<string, number>();
  const released = new Map<string, number>();
  let spawnedAt = 0;

  beforeAll(async () => {
    const manifest = join(dir, "silence.yaml");
    const reportFile = join(dir, "report.json");
    const env = [{ name: "D", value: dir }];
    writeFileSync(
      manifest,
      stringify({
        apiVersion: "playbook.dev/v1alpha1",
        kind: "Playbook",
        metadata: { name: "silence" },
        spec: {
          tasks: [
            // Chatty for a while, then at least 0.8s of nothing in the middle, then chatty again.
            {
              name: "pause",
              run: `for i in 1 2 3 4 5; do echo $i; sleep 0.02; done; echo mark; ${waitFor("pause-go")}; sleep 0.8; echo after; for i in 1 2 3; do echo $i; sleep 0.02; done`,
              env,
            },
            // One line, then nothing until its end: the silence that lasts to the end counts.
            { name: "quiet", run: `echo begin; ${waitFor("quiet-go")}; sleep 0.5`, env },
            // Line after line, each as soon as the test has seen the one before: short silences.
            {
              name: "chatty",
              run: `for i in $(seq ${CHATTY_LINES}); do echo line-$i; ${waitFor("chatty-$i")}; done`,
              env,
            },
            // Silent until its stall limit fires, and deaf to SIGTERM: it takes the SIGKILL a
            // second later. The silence reaches the limit and stops at the stop.
            { name: "stuck", run: "trap '' TERM; echo start; sleep 30", stall: "300ms" },
          ],
          killGrace: "1s",
        },
      }),
    );
    // Each line the test waits for, and the file it then creates for the task to go on.
    const releases = new Map<string, string>([
      ["[pause] mark", "pause-go"],
      ["[quiet] begin", "quiet-go"],
      ...Array.from({ length: CHATTY_LINES }, (_, i): [string, string] => [
        `[chatty] line-${i + 1}`,
        `chatty-${i + 1}`,
      ]),
    ]);
    const watched = [...releases.keys(), "[pause] after", "[stuck] start"];
    const result = await startCli(["run", "-f", manifest, "-o", "json", "--report", reportFile], {
      env: { [MARKER_VAR]: currentMarker() },
      onSpawn: (child) => {
        spawnedAt = performance.now();
        let text = "";
        child.stderr?.on("data", (chunk: Buffer) => {
          text += chunk.toString();
          const now = performance.now();
          for (const line of watched) {
            if (seen.has(line) || !text.includes(`${line}\n`)) continue;
            seen.set(line, now);
            const file = releases.get(line);
            if (file === undefined) continue;
            released.set(file, performance.now());
            writeFileSync(join(dir, file), "");
          }
        });
      },
    });
    code = result.code;
    stderr = result.stderr;
    tasks = JSON.parse(result.stdout).status.tasks;
    reported = JSON.parse(readFileSync(reportFile, "utf8")).tasks;
  }, 60_000);

  const rowOf = (name: string) => {
    const row = tasks.find((task) => task.name === name);
    expect(row?.longestSilence, `${name}: ${JSON.stringify(row)}`).toBeDefined();
    return row as Row;
  };
  const silenceOf = (name: string) => parseDuration(rowOf(name).longestSilence as string);
  const at = (map: Map<string, number>, key: string) => {
    const time = map.get(key);
    expect(time, `${key}: not seen (${[...map.keys()].join(", ")})`).toBeDefined();
    return time as number;
  };

  it("ends on the stuck task's stall limit", () => {
    expect(code, stderr).toBe(124);
    expect(tasks.map((task) => [task.name, task.phase, task.limit])).toEqual([
      ["pause", "Succeeded", undefined],
      ["quiet", "Succeeded", undefined],
      ["chatty", "Succeeded", undefined],
      ["stuck", "TimedOut", "StallLimit"],
    ]);
    expect(existsSync(join(dir, `chatty-${CHATTY_LINES}`))).toBe(true);
  });

  it("gives the pause in the middle of a task's output, not its chatty parts", () => {
    // The runner had the mark before the test saw it, so before the task was let go; the line
    // after comes 0.8s after that at the least, and the runner has it before the test sees it.
    const pause = silenceOf("pause");
    expect(pause).toBeGreaterThanOrEqual(800);
    // Every silence of the task lies between the CLI's start and quiet's first line.
    expect(pause).toBeLessThanOrEqual(at(seen, "[quiet] begin") - spawnedAt);
  });

  it("counts a silence that lasts to the task's end", () => {
    expect(silenceOf("quiet")).toBeGreaterThanOrEqual(500);
  });

  it("gives a chatty task a silence no longer than the longest wait between two of its lines", () => {
    // Line i+1 is written after the test let line i-1's wait go, and read before the test sees
    // it: no silence between two lines is longer than that window. Before the first line, the
    // window opens when quiet was let go (chatty starts after quiet's 0.5s); after the last,
    // it closes when the test saw stuck's first line (stuck starts after chatty ends).
    const windows = [at(seen, "[chatty] line-1") - (at(released, "quiet-go") + 500)];
    for (let i = 2; i <= CHATTY_LINES; i++) {
      const before = i === 2 ? at(released, "quiet-go") + 500 : at(released, `chatty-${i - 2}`);
      windows.push(at(seen, `[chatty] line-${i}`) - before);
    }
    windows.push(at(seen, "[stuck] start") - at(released, `chatty-${CHATTY_LINES - 1}`));
    const chatty = silenceOf("chatty");
    expect(chatty, `windows ${windows.map(Math.round).join(", ")} ms`).toBeLessThanOrEqual(
      Math.max(...windows) + 1,
    );
  });

  it("gives a task its stall limit stopped a silence of at least that limit, counted to the stop, not the grace", () => {
    const stuck = silenceOf("stuck");
    expect(stuck).toBeGreaterThanOrEqual(299);
    // The 1s kill grace it sat out is not silence: the task's own start and end hold the
    // silence and the grace one after the other.
    const row = rowOf("stuck");
    const length = Date.parse(row.completionTime ?? "") - Date.parse(row.startTime ?? "");
    expect(stuck).toBeLessThanOrEqual(length - 1000 + 2);
  });

  it("writes the same figure in ms to the report (`ls`)", () => {
    expect(reported.map((task) => task.ls)).toEqual(
      tasks.map((task) => parseDuration(task.longestSilence ?? "")),
    );
  });
});
