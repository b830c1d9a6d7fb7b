// The pod runner's plain progress lines, read back by `submit --watch`: every line Progress prints
// without a terminal reads back into the event it came from, and printing what was read gives the
// same lines again.
import { PassThrough } from "node:stream";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, type ResolvedLimits, resolveLimits } from "../../src/api/limits.js";
import { PlaybookSpecSchema } from "../../src/api/playbook.js";
import { TASK_LIMITS } from "../../src/api/reasons.js";
import type { RunOutcome, TaskOutcome } from "../../src/api/report.js";
import { Progress } from "../../src/cli/progress.js";
import { type ProgressLine, ProgressLineReader } from "../../src/cli/progress-lines.js";
import type { AttemptStop } from "../../src/pod-runner/attempt.js";
import type { RunEvent } from "../../src/pod-runner/run.js";

const duration = fc.oneof(
  fc.constantFrom("0s", "1s", "90s", "10m", "1h30m", "250ms", "1.5s"),
  fc.integer({ min: 1, max: 10_000_000 }).map((ms) => `${ms}ms`),
);

const taskArb = fc.record({
  timeout: fc.option(
    duration.filter((d) => d !== "0s"),
    { nil: undefined },
  ),
  stall: fc.option(duration, { nil: undefined }),
  retries: fc.integer({ min: 0, max: 3 }),
});

const specArb = fc.record({
  ceiling: fc.option(fc.constantFrom("30m", "1h", "90s", "2h"), { nil: undefined }),
  stall: fc.option(duration, { nil: undefined }),
  killGrace: fc.option(fc.constantFrom("0s", "2s", "10s"), { nil: undefined }),
  tasks: fc.array(taskArb, { minLength: 1, maxLength: 4 }),
  policy: fc.option(
    fc.record({
      stallMs: fc.option(fc.constantFrom(0, 5000, 300_000), { nil: undefined }),
      // maximums.taskTimeout: the timeout (source policy) of a task that sets none.
      taskTimeoutMs: fc.option(fc.constantFrom(1000, 600_000), { nil: undefined }),
    }),
    { nil: undefined },
  ),
});

type Step = { event: RunEvent; at: number };

/** What a stop with a grace did, as its line says it (killGrace 0 says neither). */
const TERMS = [
  { delivered: true, detail: "SIGTERM sent to its process group" },
  { delivered: true, detail: "SIGTERM sent to its process group through the agent of container task-1" },
  {
    delivered: false,
    detail:
      "SIGTERM not delivered: the agent of container task-1 is stopped (SIGSTOP, sent by a task) and carries out no signal",
  },
  {
    delivered: false,
    detail: "SIGTERM not sent to its process group: its shell had exited (what it left gets one each)",
  },
];

/** A plausible event sequence for the spec: each task starts, maybe retries, maybe stops, ends. */
function eventsFor(limits: ResolvedLimits, choices: number[]): Step[] {
  const steps: Step[] = [];
  let at = 1_000_000;
  let pick = 0;
  const next = () => choices[pick++ % choices.length] as number;
  const stopDone = (stop: AttemptStop): AttemptStop =>
    limits.killGrace.ms === 0
      ? stop
      : { ...stop, cancelFileWritten: next() % 3 !== 0, term: TERMS[next() % TERMS.length] };
  steps.push({
    event: { type: "containment", kind: "agents", description: "agents in 1 task container(s) (task-1: x)" },
    at,
  });
  for (const [index, task] of limits.tasks.entries()) {
    const attempts = 1 + (next() % (task.retries + 1));
    for (let attempt = 1; attempt <= attempts; attempt++) {
      steps.push({ event: { type: "task-started", index, name: task.name, attempt, limits: task }, at });
      at += next() * 37;
      if (attempt < attempts) {
        const killed = next() % 2 === 0;
        steps.push({
          event: {
            type: "task-retrying",
            index,
            name: task.name,
            attempt: attempt + 1,
            attempts: task.retries + 1,
            exitCode: killed ? null : 1 + (next() % 200),
            delayMs: (next() % 50) * 100,
            signal: killed ? "SIGKILL" : null,
          },
          at,
        });
      }
    }
    const ending = next() % 4;
    const outcome: TaskOutcome = {
      name: task.name,
      phase: "Succeeded",
      attempts,
      exitCode: 0,
      signal: null,
    };
    // What the attempt cost, as the finished line shows it (values that its rounding keeps).
    if (next() % 2 === 0) {
      const unit = next() % 2 === 0 ? 1024 : 1024 * 1024;
      Object.assign(outcome, {
        cpuSeconds: (next() * 7) / 100,
        peakMemoryBytes: (1 + (next() % 1000)) * unit,
      });
    }
    if (ending === 1) Object.assign(outcome, { phase: "Failed", exitCode: next() % 256 });
    if (ending === 2) {
      const limit = TASK_LIMITS[next() % TASK_LIMITS.length] as (typeof TASK_LIMITS)[number];
      steps.push({
        event: { type: "task-stopping", index, name: task.name, stop: stopDone({ kind: "limit", limit }) },
        at,
      });
      if (next() % 2 === 0) {
        const when = next() % 2 === 0 ? "stop" : "end";
        steps.push({
          event: { type: "output-dropped", index, name: task.name, bytes: next() * 977, when },
          at,
        });
      }
      Object.assign(outcome, {
        phase: "TimedOut",
        limit,
        ending: "Killed",
        exitCode: null,
        signal: "SIGKILL",
      });
    }
    if (ending === 3) {
      steps.push({
        event: { type: "task-stopping", index, name: task.name, stop: stopDone({ kind: "cancelled" }) },
        at,
      });
      Object.assign(outcome, { phase: "Cancelled", ending: "Exited", exitCode: 143, signal: null });
    }
    at += next() * 11;
    steps.push({ event: { type: "task-finished", index, outcome }, at });
    if (ending !== 0) break;
  }
  if (next() % 3 === 0) {
    const found = 1 + (next() % 4);
    const ended = next() % 2 === 0 ? found : next() % found;
    steps.push({ event: { type: "leftovers-swept", found, ended, warnings: [] }, at });
  }
  return steps;
}

function collect(): { out: PassThrough; text: () => string } {
  const out = new PassThrough();
  let text = "";
  out.on("data", (chunk: Buffer) => {
    text += chunk.toString();
  });
  return { out, text: () => text };
}

function outcomeOf(limits: ResolvedLimits, steps: Step[]): RunOutcome {
  const finished = steps.flatMap((s) => (s.event.type === "task-finished" ? [s.event.outcome] : []));
  const tasks = limits.tasks.map(
    (task, index): TaskOutcome =>
      finished[index] ?? { name: task.name, phase: "Skipped", attempts: 0, exitCode: null, signal: null },
  );
  const failed = tasks.find((t) => t.phase !== "Succeeded" && t.phase !== "Skipped");
  return {
    phase: failed ? "Failed" : "Succeeded",
    reason: failed ? "TaskFailed" : "Succeeded",
    startTime: new Date(0),
    completionTime: new Date(0),
    tasks,
  };
}

describe("progress lines read back", () => {
  it("give the events they were printed from, and print the same lines again", () => {
    fc.assert(
      fc.property(specArb, fc.array(fc.nat(1000), { minLength: 1, maxLength: 20 }), (drawn, choices) => {
        const spec = PlaybookSpecSchema.parse({
          ...(drawn.ceiling ? { ceiling: drawn.ceiling } : {}),
          ...(drawn.stall ? { stall: drawn.stall } : {}),
          ...(drawn.killGrace ? { killGrace: drawn.killGrace } : {}),
          tasks: drawn.tasks.map((task, index) => ({
            name: `task-${index}`,
            run: "true",
            retries: task.retries,
            ...(task.timeout ? { timeout: task.timeout } : {}),
            ...(task.stall ? { stall: task.stall } : {}),
          })),
        });
        const limits = resolveLimits(spec, { ...LOCAL_DEFAULTS, ceilingMs: 7_200_000, policy: drawn.policy });
        const steps = eventsFor(limits, choices);
        const outcome = outcomeOf(limits, steps);

        const first = collect();
        const progress = new Progress({ out: first.out, tty: false, limits, outputBytes: () => 0 });
        progress.begin("ns/pb", limits.tasks.length);
        for (const step of steps) progress.event(step.event, step.at);
        progress.end(outcome, "what the report says");

        const reader = new ProgressLineReader(spec.tasks.map((t) => ({ name: t.name, retries: t.retries })));
        const lines = first.text().trimEnd().split("\n");
        const read: ProgressLine[] = lines.map((line) => reader.read(line));
        const begin = read[0];
        if (begin?.kind !== "begin") throw new Error(`not a begin line: ${lines[0]}`);
        expect(begin.limits).toEqual({
          ceiling: limits.ceiling,
          stall: limits.stall,
          killGrace: limits.killGrace,
          startTimeout: limits.startTimeout,
        });
        expect(begin).toMatchObject({ name: "ns/pb", taskCount: limits.tasks.length });
        const events = read.flatMap((line) => (line.kind === "event" ? [line.event] : []));
        // A finished task's line also gives its time as the runner measured it (tookMs).
        const withoutTook = events.map((event) => {
          if (event.type !== "task-finished") return event;
          const { tookMs, ...rest } = event;
          expect(tookMs).toEqual(expect.any(Number));
          return rest;
        });
        // A started task's line says its limits, not its retry waits (those are the runner's to keep).
        const withoutWaits = steps.map(({ event }) => {
          if (event.type !== "task-started") return event;
          const { retryWaits: _waits, ...limits } = event.limits;
          return { ...event, limits };
        });
        expect(withoutTook).toEqual(withoutWaits);
        expect(read.at(-1)).toEqual({
          kind: "end",
          phase: outcome.phase,
          reason: outcome.reason,
          message: "what the report says",
        });

        // Printed again, from what was read and when it happened: the same text.
        const again = collect();
        const shown = new Progress({
          out: again.out,
          tty: false,
          limits: begin.limits,
          outputBytes: () => 0,
        });
        let step = 0;
        for (const line of read) {
          if (line.kind === "begin") shown.begin(line.name, line.taskCount);
          else if (line.kind === "event") shown.event(line.event, steps[step++]?.at);
          else if (line.kind === "skipped" || line.kind === "end") shown.say(lines[read.indexOf(line)] ?? "");
          else shown.say(line.line);
        }
        expect(again.text()).toBe(first.text());
      }),
      { numRuns: 300 },
    );
  });

  it("shows a task's time as the runner measured it, not the time between its lines' log stamps", () => {
    const limits = resolveLimits(PlaybookSpecSchema.parse({ tasks: [{ name: "slow", run: "sleep 8" }] }), {
      ...LOCAL_DEFAULTS,
      ceilingMs: 7_200_000,
    });
    const reader = new ProgressLineReader([{ name: "slow", retries: 0 }]);
    const shown = collect();
    const progress = new Progress({ out: shown.out, tty: false, limits, outputBytes: () => 0 });
    progress.begin("ns/pb", 1);
    // containerd stamped the start line a little late: 7.999 s between the two stamps.
    for (const [line, at] of [
      [
        "playbook: task slow started (no timeout of its own, stall 10m (default), ceiling 30m (default))",
        1_000,
      ],
      ["playbook: task slow Succeeded in 8.004s", 8_999],
    ] as const) {
      const read = reader.read(line);
      if (read.kind !== "event") throw new Error(`not an event: ${line}`);
      progress.event(read.event, at);
    }
    expect(shown.text()).toMatch(/^playbook: task slow Succeeded in 8\.004s$/m);
  });

  it("reads a finished task's CPU and peak memory back from its line", () => {
    const reader = new ProgressLineReader([{ name: "heavy", retries: 0 }]);
    const read = reader.read("playbook: task heavy Failed in 3.2s (exit code 1, cpu 1.02s, peak 201 MiB)");
    expect(read).toMatchObject({
      kind: "event",
      event: {
        type: "task-finished",
        outcome: { phase: "Failed", exitCode: 1, cpuSeconds: 1.02, peakMemoryBytes: 201 * 1024 * 1024 },
      },
    });
    expect(reader.read("playbook: task heavy Succeeded in 1s (cpu 0.00s, peak 1.5 GiB)")).toMatchObject({
      event: { outcome: { cpuSeconds: 0, peakMemoryBytes: 1.5 * 1024 ** 3 } },
    });
  });

  it("leaves task output and lines of no event as they are", () => {
    const reader = new ProgressLineReader([{ name: "build", retries: 0 }]);
    for (const line of [
      "[build] playbook: task build Succeeded",
      "playbook: received SIGTERM; cancelling the run (again to kill at once)",
      "playbook: warning: a process could not be killed",
      "playbook: task other Succeeded in 1s",
    ]) {
      expect(reader.read(line)).toEqual({ kind: "other", line });
    }
  });
});
