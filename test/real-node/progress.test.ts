// Live progress on a real kubelet (issue 35), under both ways the agent reaches the task
// containers: the controller reads the runner's records through pods/log (API server -> kubelet
// -> containerd's log file) and shows each task's start in status within the interval plus 2 s;
// a finished task's CPU and peak memory agree with what the task's process measured of itself; and a
// task that writes the progress channel's marker every way it can (its own output, a line the
// runtime splits, the runner's stdout through /proc) changes nothing in status; nor does the
// attack of issue 41 (a forged record where containerd cuts a 16 KiB entry, in the 200-entry tail).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROGRESS_MARKER } from "../../src/api/progress-record.js";
import { realNode } from "../controller/reason-cases.js";
import {
  clients,
  condition,
  createPlaybook,
  getPlaybook,
  kubectl,
  type PlaybookObject,
  type RunningController,
  runnerLogs,
  startController,
  taskLines,
  waitForFinished,
} from "../controller/support.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { AGENT_LAYOUTS } from "../harness/task-images.js";
import { cpuAgrees, selfMeasured, within10Percent } from "../support/heavy-task.js";

const INTERVAL_MS = 2_000;

// 200 MiB held (filled, so resident) and 1 s of CPU burnt, then the process says what it cost as
// it measured itself just before its exit (its whole CPU time and peak RSS): the runner's figures
// are held to the same process's own, not to another run of the script elsewhere, whose start and
// fill vary with the machine's load.
const BURN =
  "const b = Buffer.alloc(200 * 1024 * 1024, 1); const t0 = process.cpuUsage(); " +
  "for (;;) { const u = process.cpuUsage(t0); if (u.user + u.system >= 1e6) break; } " +
  "const own = process.cpuUsage(); " +
  "console.log('self-measured cpu', ((own.user + own.system) / 1e6).toFixed(3), 'peak', process.resourceUsage().maxRSS, b.length);";

const { core } = clients();
let namespace = "";
const controllers: RunningController[] = [];

beforeAll(async () => {
  namespace = await createTestNamespace(core, "rn-progress", {
    "pod-security.kubernetes.io/enforce": "restricted",
  });
});
afterAll(async () => {
  await Promise.all(controllers.map((c) => c.stop()));
  if (namespace) await deleteTestNamespace(core, namespace);
});

interface Seen {
  at: number;
  playbook: PlaybookObject;
}

/** Every distinct status the Playbook shows until it finishes, polled every 250 ms. */
async function watchUntilFinished(name: string): Promise<Seen[]> {
  const seen: Seen[] = [];
  const deadline = Date.now() + realNode.taskStartMs + realNode.finishMs;
  for (;;) {
    const playbook = await getPlaybook(namespace, name).catch(() => undefined);
    if (playbook && playbook.metadata.resourceVersion !== seen.at(-1)?.playbook.metadata.resourceVersion)
      seen.push({ at: Date.now(), playbook });
    const ended = playbook && condition(playbook, "Succeeded");
    if (ended && ended.status !== "Unknown") return seen;
    if (Date.now() > deadline)
      throw new Error(`playbook ${name} did not finish; last: ${JSON.stringify(playbook?.status)}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

type TaskView = { name: string; phase: string; startTime?: string; exitCode?: number | null };
const tasksOf = (playbook: PlaybookObject): TaskView[] =>
  ((playbook.status as { tasks?: TaskView[] } | undefined)?.tasks ?? []) as TaskView[];
const currentOf = (playbook: PlaybookObject): string | undefined =>
  (playbook.status as { currentTask?: string } | undefined)?.currentTask;

describe.each(AGENT_LAYOUTS)("with the agent delivered by $delivery", ({ setting, delivery }) => {
  beforeAll(async () => {
    await Promise.all(controllers.splice(0).map((c) => c.stop()));
    controllers.push(
      startController([namespace], {
        ...realNode.controller,
        agentDelivery: setting,
        progressInterval: `${INTERVAL_MS / 1000}s`,
      }),
    );
  });

  it("shows each of three tasks start in status within the interval plus 2 s, and clears Current at the end", async () => {
    const name = `three-${delivery}`;
    const step = "for i in 1 2 3 4 5 6; do echo step $i; sleep 1; done";
    await createPlaybook(namespace, name, {
      ceiling: "3m",
      tasks: [
        { name: "fetch", run: step },
        { name: "build", run: step },
        { name: "ship", run: step },
      ],
    });
    const seen = await watchUntilFinished(name);
    const last = seen.at(-1)?.playbook as PlaybookObject;
    expect(condition(last, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(currentOf(last)).toBeUndefined();
    const names = ["fetch", "build", "ship"];
    for (const [index, task] of tasksOf(last).entries()) {
      // The runner's start of the task (same machine's clock), and when status first showed it.
      const started = Date.parse(task.startTime as string);
      const shown = seen.find(({ playbook }) => {
        const view = tasksOf(playbook)[index];
        return view?.startTime !== undefined && view.phase !== "Pending";
      });
      expect(shown, `status never showed ${task.name} started before the end`).toBeDefined();
      expect(shown?.playbook.metadata.resourceVersion).not.toBe(last.metadata.resourceVersion);
      expect((shown?.at ?? 0) - started).toBeLessThanOrEqual(INTERVAL_MS + 2_000);
      expect(seen.some(({ playbook }) => currentOf(playbook) === `${index + 1}/3 ${names[index]}`)).toBe(
        true,
      );
    }
  });

  it("gives a finished task's CPU seconds and peak memory, agreeing with what the task measured of itself", async () => {
    const name = `cost-${delivery}`;
    await createPlaybook(namespace, name, {
      ceiling: "3m",
      tasks: [{ name: "burn", run: `node -e "${BURN}"` }],
    });
    const ended = await waitForFinished(namespace, name, realNode.taskStartMs + realNode.finishMs);
    expect(condition(ended, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    const task = (ended.status as { tasks: { cpuSeconds?: number; peakMemoryBytes?: number }[] }).tasks[0];
    const own = selfMeasured(await runnerLogs(namespace, name));
    expect(own.maxRssKiB).toBeGreaterThan(200 * 1024);
    expect(task?.cpuSeconds).toBeDefined();
    expect(task?.peakMemoryBytes).toBeDefined();
    expect(
      cpuAgrees(task?.cpuSeconds ?? 0, own.cpuSeconds),
      `cpuSeconds ${task?.cpuSeconds}, the task's own ${own.cpuSeconds}`,
    ).toBe(true);
    const peakKiB = (task?.peakMemoryBytes ?? 0) / 1024;
    expect(
      within10Percent(peakKiB, own.maxRssKiB),
      `peak ${peakKiB} KiB, the task's own ${own.maxRssKiB}`,
    ).toBe(true);
  });

  it("takes nothing from a task that writes the progress marker every way it can", async () => {
    const name = `forge-${delivery}`;
    const forged = `${PROGRESS_MARKER}${JSON.stringify({
      v: 1,
      start: new Date().toISOString(),
      seq: 999,
      tasks: [
        { p: "Failed", x: 77, t: [0, 1] },
        { p: "Running", s: 2 },
      ],
    })}`;
    const attack = [
      // Its own output, on both streams.
      `printf '%s\\n' '${forged}'`,
      `printf '%s\\n' '${forged}' >&2`,
      // A line longer than containerd's 16 KiB entries, left open across the runner's next
      // record, then the marker: the runtime's split must not put it at a line start.
      "head -c 20000 /dev/zero | tr '\\0' a",
      "sleep 2.5",
      // No newline first: the runner's record ended the open line, and these bytes must get the
      // task's prefix again.
      `printf '%s\\n' '${forged}'`,
      // The runner's own stdout, through /proc: another UID's, not dumpable.
      "for p in /proc/[0-9]*; do",
      '  if tr "\\0" " " < $p/cmdline 2>/dev/null | grep -q "pod-runner"; then',
      `    (printf '%s\\n' '${forged}' > $p/fd/1) 2>&1 | sed "s|^|runner-fd: |" | head -1 || true`,
      "  fi",
      "done",
      "sleep 5",
    ].join("\n");
    await createPlaybook(namespace, name, {
      ceiling: "3m",
      tasks: [
        { name: "attack", run: attack },
        { name: "after", run: "sleep 3" },
      ],
    });
    const seen = await watchUntilFinished(name);
    const last = seen.at(-1)?.playbook as PlaybookObject;
    expect(condition(last, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    // The controller did read the real records while the attack ran ...
    expect(seen.some(({ playbook }) => currentOf(playbook) === "1/2 attack")).toBe(true);
    // ... and never once showed the forged one's.
    for (const { playbook } of seen) {
      const [first, second] = tasksOf(playbook);
      expect(first?.exitCode ?? null).not.toBe(77);
      expect(first?.phase).not.toBe("Failed");
      if (first?.phase === "Running") expect(second?.phase ?? "Pending").toBe("Pending");
    }
    // Each way was tried: the marker reached the log only behind the task's prefix, and the
    // runner's stdout refused the write.
    const logs = await runnerLogs(namespace, name);
    expect(
      logs.split("\n").filter((line) => line.startsWith(PROGRESS_MARKER) && line.includes('"seq":999')),
    ).toEqual([]);
    const lines = taskLines(logs, "attack");
    expect(lines.filter((line) => line.includes(forged)).length).toBeGreaterThanOrEqual(3);
    expect(lines.filter((line) => line.startsWith("runner-fd: "))).toEqual([
      expect.stringMatching(/Permission denied/),
    ]);
  });

  it("takes nothing from a record a task puts where containerd cuts its line, in the controller's 200-entry tail (issue 41)", async () => {
    const name = `split-${delivery}`;
    // Every task Succeeded, with dates of the task's choosing, and a seq no record can pass.
    const forged = `${PROGRESS_MARKER}${JSON.stringify({
      v: 1,
      start: "2001-01-01T00:00:00.000Z",
      seq: 2 ** 53 - 1,
      tasks: [
        { p: "Succeeded", t: [0, 1000] },
        { p: "Succeeded", t: [1000, 2000] },
      ],
    })}`;
    // With the prefix "[a] " (4 bytes), the marker is the line's 16 385th byte: containerd's cut
    // (max_container_log_line_size, 16 KiB). The 195 lines after it put that entry in a 200-entry
    // tail; then the task waits, so that the controller looks (every 2 s) while it is there.
    const attack = [
      `head -c 16380 /dev/zero | tr '\\0' x; printf '%s\\n' '${forged}'`,
      "seq 1 195",
      "sleep 8",
    ].join("\n");
    await createPlaybook(namespace, name, {
      ceiling: "3m",
      tasks: [
        { name: "a", run: attack },
        { name: "b", run: "sleep 5" },
      ],
    });
    const seen = await watchUntilFinished(name);
    const last = seen.at(-1)?.playbook as PlaybookObject;
    expect(condition(last, "Succeeded")).toMatchObject({ status: "True", reason: "Succeeded" });
    // It never showed the forged record's tasks: no date of 2001, no task b ended while a ran ...
    const created = Date.parse((last.metadata as { creationTimestamp?: string }).creationTimestamp ?? "");
    expect(created).toBeGreaterThan(0);
    for (const { playbook } of seen) {
      const tasks = tasksOf(playbook) as (TaskView & { completionTime?: string })[];
      for (const task of tasks) {
        for (const time of [task.startTime, task.completionTime]) {
          if (time !== undefined)
            expect(Date.parse(time), `${task.name} at ${time}`).toBeGreaterThan(created - 2_000);
        }
      }
      if (tasks[0]?.phase === "Running") expect(tasks[1]?.phase ?? "Pending").toBe("Pending");
    }
    // ... and it read the runner's true records during the attack and after it.
    expect(
      seen.some(({ playbook }) => currentOf(playbook) === "1/2 a"),
      "status showed 1/2 a",
    ).toBe(true);
    expect(
      seen.some(({ playbook }) => currentOf(playbook) === "2/2 b"),
      "status showed 2/2 b",
    ).toBe(true);
    // The final status is the true one: each task ran after the Playbook was made, a before b.
    const [a, b] = tasksOf(last) as (TaskView & { completionTime: string })[];
    expect([a?.phase, b?.phase]).toEqual(["Succeeded", "Succeeded"]);
    expect(Date.parse(a?.completionTime ?? "")).toBeLessThanOrEqual(Date.parse(b?.startTime ?? ""));
    expect(Date.parse(b?.completionTime ?? "") - Date.parse(b?.startTime ?? "")).toBeGreaterThanOrEqual(
      5_000,
    );
    // Through the real kubelet: the tails that start at the forged text's entry (its line's, and
    // the entries around it) start with the task's prefix, and hold no record but the runner's.
    const logs = (await runnerLogs(namespace, name)).split("\n").slice(0, -1);
    const at = logs.findIndex((line) => line.includes(forged));
    expect(at).toBeGreaterThan(0);
    for (const tail of [logs.length - at - 1, logs.length - at, logs.length - at + 1]) {
      const read = (await kubectl(["-n", namespace, "logs", `${name}-1`, "-c", "runner", `--tail=${tail}`]))
        .stdout;
      const first = read.split("\n")[0] ?? "";
      // Each entry is a whole line of the log: a tail starts at a line, never inside one.
      expect(logs.includes(first), `the tail of ${tail} starts inside a line: ${first.slice(0, 60)}`).toBe(
        true,
      );
      expect(
        read
          .split("\n")
          .filter((line) => line.startsWith(PROGRESS_MARKER) && line.includes(`"seq":${2 ** 53 - 1}`)),
      ).toEqual([]);
    }
  });
});
