// `npm run bench:runner`: the runner beside references measured in the same run, printed as
// ratios (these machines are shared and noisy; absolute numbers mean little).
//   (a) kill latency: from the deadline to the whole tree dead, and to the run's end, vs GNU
//       `timeout -s KILL`
//   (b) per-task overhead over 1000 trivial tasks, vs a bare `sh -c true` spawn
//   (c) stdout throughput of a task printing 1 GiB through the runner, vs a raw pipe read by Node
//   (d) stdout throughput with secret masking on (one 32-byte value), vs the runner with it off
// Each comparison carries the spread of its samples (p10..p90) and the machine's load while it
// was measured; `--repeat N` runs the whole comparison N times and reports the spread of the ratios.
import { spawn, spawnSync } from "node:child_process";
import { appendFileSync, mkdtempSync, open, readFileSync, rmSync } from "node:fs";
import { Socket } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { constants, PerformanceObserver, performance } from "node:perf_hooks";
import { Writable } from "node:stream";
import { parseArgs } from "node:util";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { type PlaybookSpec, PlaybookSpecSchema } from "../../src/api/playbook.js";
import { openContainment } from "../../src/pod-runner/containment.js";
import { type RunEvent, runPlaybook } from "../../src/pod-runner/run.js";
import { MachineLoad } from "./machine-load.js";
import { type Comparison, ComparisonSchema, mergeRepeats } from "./results.js";
import { median, percentile, spread } from "./stats.js";

// Orphans of the killed trees (here and under GNU timeout) must be reaped promptly, as tini does
// as a pod's PID 1 (see the Dockerfile): where this machine's PID 1 reaps lazily, zombies pile up
// by the hundred and every /proc look of the runner reads them. So the benchmark runs itself under
// `tini -s` (a subreaper) when it can, and says so.
const REAPED_VAR = "PLAYBOOK_BENCH_UNDER_TINI";
if (process.env[REAPED_VAR] === undefined && spawnSync("tini", ["--version"]).status === 0) {
  const rerun = spawnSync("tini", ["-s", "--", process.execPath, ...process.argv.slice(1)], {
    stdio: "inherit",
    env: { ...process.env, [REAPED_VAR]: "1" },
  });
  process.exit(rerun.status ?? 1);
}
const reaper =
  process.env[REAPED_VAR] === undefined
    ? "PID 1 (tini not found: on machines whose PID 1 reaps lazily, install it, e.g. apt-get install tini)"
    : "tini -s";

const { values: flags } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    "kill-rounds": { type: "string" },
    tasks: { type: "string" },
    bytes: { type: "string" },
    "results-file": { type: "string" },
    section: { type: "string" },
    repeat: { type: "string", default: "1" },
  },
});
const quick = flags.quick ?? false;
/** Rounds of the 100-process tree's kill (the issue asks for at least 300); the smaller trees take a third. */
const KILL_ROUNDS = Number(flags["kill-rounds"] ?? (quick ? 10 : 300));
const TASKS = Number(flags.tasks ?? (quick ? 200 : 1000));
const BYTES = Number(flags.bytes ?? (quick ? 128 : 1024)) * 1024 * 1024;
const REPEAT = Number(flags.repeat);
if (!Number.isInteger(REPEAT) || REPEAT < 1)
  throw new Error(`--repeat=${flags.repeat}: must be a whole number of at least 1`);
const DEADLINE_MS = 300;
// `npm run bench` folds these results into its own: each section appends its comparisons here,
// one JSON object a line, in the shape of test/bench/results.ts.
const RESULTS_FILE = flags["results-file"];

/** Starts the load sampler for one comparison; record() takes its reading. */
let load = new MachineLoad();
const measuring = () => {
  load.stop();
  load = new MachineLoad();
};

function record(
  comparison: Omit<Comparison, "spread" | "load" | "repeats">,
  samples: { ours: number[]; reference: number[]; ratios?: number[] },
): void {
  const entry = ComparisonSchema.parse({
    ...comparison,
    spread: {
      ours: spread(samples.ours),
      reference: spread(samples.reference),
      ...(samples.ratios ? { ratio: spread(samples.ratios) } : {}),
    },
    load: load.reading(),
  });
  if (RESULTS_FILE) appendFileSync(RESULTS_FILE, `${JSON.stringify(entry)}\n`);
}

function discard(): Writable & { bytes: number } {
  const sink = new Writable({
    highWaterMark: 1 << 16,
    write(chunk: Buffer, _e, callback) {
      sink.bytes += chunk.length;
      callback();
    },
  }) as Writable & { bytes: number };
  sink.bytes = 0;
  return sink;
}

async function runTasks(
  spec: object,
  onEvent?: (event: RunEvent) => void,
  maskValues?: readonly string[],
): Promise<number> {
  const parsed: PlaybookSpec = PlaybookSpecSchema.parse(spec);
  const started = performance.now();
  // The discard sink is done with a chunk when it calls back, as the runner's stdout is.
  await runPlaybook({
    tasks: parsed.tasks,
    limits: resolveLimits(parsed, LOCAL_DEFAULTS),
    sink: discard(),
    recycleOutput: true,
    ...(onEvent ? { onEvent } : {}),
    ...(maskValues ? { maskValues } : {}),
  });
  return performance.now() - started;
}

/** A kill round: from the deadline to the whole tree dead, and to the killer's end (its return, its close). */
interface KillTimes {
  dead: number;
  end: number;
}

/**
 * `size` processes that each hold the output pipe and `fifo` open for writing, plus the shell that
 * started them. The FIFO's end of file, seen by the bench, is the moment the last of them died,
 * whoever killed them: the same witness for the runner and the reference.
 */
function tree(size: number, fifo: string): string {
  return `exec 3>'${fifo}'; i=1; while [ $i -lt ${size} ]; do sleep 60 & i=$((i+1)); done; echo ready; sleep 60`;
}

/**
 * Opens `fifo` for reading: resolves once the tree's shell opened it for writing, then returns
 * when the last writer is gone (performance.now()). The open blocks a threadpool thread until the
 * tree starts; the wait for the end of file is the event loop's.
 */
async function treeGone(fifo: string): Promise<Promise<number>> {
  const fd = await new Promise<number>((resolve, reject) =>
    open(fifo, "r", (error, opened) => (error ? reject(error) : resolve(opened))),
  );
  const reader = new Socket({ fd, readable: true, writable: false });
  return new Promise<number>((resolve) => {
    reader.on("end", () => {
      resolve(performance.now());
      reader.destroy();
    });
    reader.resume();
  });
}

async function timeGnuTimeout(size: number, fifo: string): Promise<KillTimes> {
  const opened = treeGone(fifo);
  const spawned = performance.now();
  const child = spawn("timeout", ["-s", "KILL", `${DEADLINE_MS / 1000}`, "sh", "-c", tree(size, fifo)], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  // Its timer is armed once it runs, just after this: the deadline counted from here is at most
  // its start early, which counts against the reference, not the runner.
  const deadline = spawned + DEADLINE_MS;
  child.stdout.resume();
  child.stderr.resume();
  const closed = new Promise<number>((resolve) => child.on("close", () => resolve(performance.now())));
  const dead = await await opened;
  return { dead: dead - deadline, end: (await closed) - deadline };
}

async function timeRunner(size: number, fifo: string): Promise<KillTimes> {
  const opened = treeGone(fifo);
  let deadline = Number.NaN;
  // The attempt's deadline is counted from the moment the runner says the task started.
  const onEvent = (event: RunEvent) => {
    if (event.type === "task-started") deadline = performance.now() + DEADLINE_MS;
  };
  const spec = {
    killGrace: "0s",
    tasks: [{ name: "tree", timeout: `${DEADLINE_MS}ms`, run: tree(size, fifo) }],
  };
  const returned = runTasks(spec, onEvent).then(() => performance.now());
  const dead = await await opened;
  return { dead: dead - deadline, end: (await returned) - deadline };
}

function spawnBare(
  command: { file: string; args: string[] } = { file: "sh", args: ["-c", "true"] },
): Promise<void> {
  return new Promise((resolve) => {
    const child = spawn(command.file, command.args, { stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.resume();
    child.stderr.resume();
    child.on("close", () => resolve());
  });
}

function rawPipe(bytes: number, command: string): Promise<number> {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn("sh", ["-c", command], { stdio: ["ignore", "pipe", "inherit"] });
    let seen = 0;
    child.stdout.on("data", (chunk: Buffer) => {
      seen += chunk.length;
    });
    child.on("close", () => {
      if (seen < bytes) throw new Error(`raw pipe saw ${seen} bytes`);
      resolve(performance.now() - started);
    });
  });
}

const fmt = (ms: number) => `${ms.toFixed(1)} ms`;

/** (a) kill latency, interleaved so both see the same machine load. */
async function killLatency(): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), "bench-kill-"));
  const fifo = path.join(dir, "tree");
  if (spawnSync("mkfifo", [fifo]).status !== 0) throw new Error(`mkfifo ${fifo} failed`);
  for (const size of [1, 10, 100]) {
    measuring();
    const rounds = size === 100 ? KILL_ROUNDS : Math.max(1, Math.ceil(KILL_ROUNDS / 3));
    const gnu: KillTimes[] = [];
    const ours: KillTimes[] = [];
    for (let round = 0; round < rounds; round++) {
      gnu.push(await timeGnuTimeout(size, fifo));
      ours.push(await timeRunner(size, fifo));
    }
    const report = (
      what: keyof KillTimes,
      name: string,
      targets: readonly (readonly [number, string])[],
      note: string,
    ) => {
      const samples = { ours: ours.map((t) => t[what]), reference: gnu.map((t) => t[what]) };
      for (const [p, target] of targets) {
        const [mine, theirs] = [percentile(samples.ours, p), percentile(samples.reference, p)];
        record(
          {
            name: `${name}_p${p}_${size}procs`,
            ours: mine,
            reference: theirs,
            unit: "ms",
            ratio: mine / theirs,
            target,
            note,
          },
          samples,
        );
      }
      const line = (values: number[]) =>
        [10, 50, 90, 99].map((p) => `p${p} ${fmt(percentile(values, p))}`).join(" ");
      console.log(
        `(a) ${what === "dead" ? "kill latency" : "kill to end "}, tree of ${String(size).padStart(3)}, ${rounds} rounds: runner ${line(samples.ours)}; ` +
          `timeout -s KILL ${line(samples.reference)}; ratio p50 ${(percentile(samples.ours, 50) / percentile(samples.reference, 50)).toFixed(2)}x, p99 ${(percentile(samples.ours, 99) / percentile(samples.reference, 99)).toFixed(2)}x`,
      );
    };
    report(
      "dead",
      "kill_latency",
      [
        [99, "<= 1.5"],
        [50, "<= 1.2"],
      ],
      `deadline to the last of the tree's processes dead (a FIFO they all hold reaches its end), against GNU timeout -s KILL; ${rounds} rounds each, interleaved`,
    );
    // The issue sets no target here: the run's end after the kill (the runner's checks, the
    // containment's end), against timeout's exit with its pipes closed.
    if (size === 100)
      report(
        "end",
        "kill_to_end",
        [
          [99, "<= 1.5"],
          [50, "<= 1.5"],
        ],
        `deadline to runPlaybook returned, against GNU timeout -s KILL exited with its pipes closed; ${rounds} rounds each, interleaved`,
      );
  }
  rmSync(dir, { recursive: true, force: true });
}

/**
 * (b) per-task overhead: rounds of `perRound` tasks, each beside the same number of bare spawns,
 * so both see the same machine load; the median round's ratio is reported.
 */
async function perTask(): Promise<void> {
  const rounds = quick ? 3 : 10;
  const perRound = Math.min(200, Math.max(1, Math.floor(TASKS / rounds)));
  const tasks = Array.from({ length: perRound }, (_, i) => ({ name: `t${i}`, run: "true" }));
  await runTasks({ tasks: tasks.slice(0, 20) }); // warm up
  // What holding a task costs before any of the runner's own work: the same bare spawn, its shell
  // started as the runner starts a task's (its oom_score_adj raised, the run's cgroup joined).
  const containment = openContainment(`bench-${process.pid.toString(16)}`);
  const contained = containment.command("true", ["sh"]);
  measuring();
  const bare: number[] = [];
  const held: number[] = [];
  const ours: number[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      const bareStart = performance.now();
      for (let i = 0; i < perRound; i++) await spawnBare();
      bare.push((performance.now() - bareStart) / perRound);
      const heldStart = performance.now();
      for (let i = 0; i < perRound; i++) await spawnBare(contained);
      held.push((performance.now() - heldStart) / perRound);
      ours.push((await runTasks({ tasks })) / perRound);
    }
  } finally {
    await containment.close();
  }
  const ratios = ours.map((value, i) => value / (bare[i] as number));
  const ratio = median(ratios);
  record(
    {
      name: "task_overhead",
      ours: median(ours),
      reference: median(bare),
      unit: "ms/task",
      ratio,
      target: "<= 1.15",
      note: `${rounds * perRound} trivial tasks against as many bare sh -c spawns; median of the rounds' ratios`,
    },
    { ours, reference: bare, ratios },
  );
  const heldRatios = held.map((value, i) => value / (bare[i] as number));
  const ownRatios = ours.map((value, i) => value / (held[i] as number));
  record(
    {
      name: "task_overhead_over_held",
      ours: median(ours),
      reference: median(held),
      unit: "ms/task",
      ratio: median(ownRatios),
      target: "<= 1.15",
      note: `the same tasks against bare spawns of a shell held as the runner holds a task's (${containment.kind}: its oom_score_adj raised${containment.kind === "cgroup" ? ", the run's cgroup joined" : ""}), which cost ${median(heldRatios).toFixed(2)}x a bare sh -c: the runner's own work per task beyond the hold`,
    },
    { ours, reference: held, ratios: ownRatios },
  );
  const s = spread(ratios);
  console.log(
    `(b) per task over ${rounds * perRound} trivial tasks: runner median ${fmt(median(ours))}, bare sh -c spawn ${fmt(median(bare))}; ` +
      `median ratio ${ratio.toFixed(2)}x, p10..p90 ${s.p10.toFixed(2)}..${s.p90.toFixed(2)} (target <= 1.15x)`,
  );
  const h = spread(ownRatios);
  console.log(
    `(b) the hold alone (${containment.kind}): a held bare spawn ${fmt(median(held))}, ${median(heldRatios).toFixed(2)}x a bare one; ` +
      `the runner over it ${median(ownRatios).toFixed(2)}x, p10..p90 ${h.p10.toFixed(2)}..${h.p90.toFixed(2)}`,
  );
}

/**
 * `measure`, counting the bench process's mark-compacts meanwhile into `counts[side]`: a pipe's
 * reads left to the GC pile up as external memory and cost one every ~60 ms (spent-chunks.ts).
 */
async function countingMajorGcs<T>(
  counts: { ours: number; reference: number },
  side: "ours" | "reference",
  measure: () => Promise<T>,
): Promise<T> {
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if ((entry as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR)
        counts[side] += 1;
    }
  });
  observer.observe({ entryTypes: ["gc"] });
  try {
    return await measure();
  } finally {
    // Entries are handed to the observer a turn late: wait for them before it stops listening.
    await new Promise((resolve) => setImmediate(resolve));
    observer.disconnect();
  }
}

/** (c) throughput, for output without newlines and for 100-byte lines; 5 interleaved rounds. */
async function throughput(): Promise<void> {
  for (const [label, command] of [
    ["no newlines", `head -c ${BYTES} /dev/zero`],
    ["100-byte lines", `yes '${"x".repeat(99)}' | head -c ${BYTES}`],
  ] as const) {
    measuring();
    const raw: number[] = [];
    const ours: number[] = [];
    const majorGcs = { ours: 0, reference: 0 };
    for (let round = 0; round < 5; round++) {
      raw.push(await countingMajorGcs(majorGcs, "reference", () => rawPipe(BYTES, command)));
      ours.push(
        await countingMajorGcs(majorGcs, "ours", () =>
          runTasks({ tasks: [{ name: "flood", run: command }] }),
        ),
      );
    }
    const perSecond = (ms: number) => BYTES / 1024 / 1024 / (ms / 1000);
    const ratios = raw.map((value, i) => value / (ours[i] as number));
    const ratio = median(ratios);
    const lines = label === "100-byte lines";
    record(
      {
        name: lines ? "stdout_throughput" : "stdout_throughput_no_newlines",
        ours: perSecond(median(ours)),
        reference: perSecond(median(raw)),
        unit: "MiB/s",
        ratio,
        target: lines ? ">= 0.9" : ">= 0.7",
        note: `${BYTES / 1024 / 1024} MiB of ${label} through the runner against a raw pipe read by Node; median of 5 rounds' ratios`,
      },
      { ours: ours.map(perSecond), reference: raw.map(perSecond), ratios },
    );
    const s = spread(ratios);
    console.log(
      `(c) throughput, ${label}: runner median ${perSecond(median(ours)).toFixed(0)} MiB/s, raw pipe ${perSecond(median(raw)).toFixed(0)} MiB/s; ` +
        `median ratio ${ratio.toFixed(2)} of raw, p10..p90 ${s.p10.toFixed(2)}..${s.p90.toFixed(2)} (target >= ${lines ? "0.90" : "0.70"}); ` +
        `mark-compacts in 5 rounds: runner ${majorGcs.ours}, raw pipe ${majorGcs.reference}`,
    );
  }
}

/**
 * (d) the secret mask's cost: 100-byte lines through the runner with one 32-byte value to mask
 * (which the output never holds: every chunk is searched, none is cut), against the runner with
 * no value; 5 interleaved rounds, the median round's ratio of throughputs.
 */
async function maskedThroughput(): Promise<void> {
  measuring();
  const command = `yes '${"x".repeat(99)}' | head -c ${BYTES}`;
  const value = "Zq7-pW2x9LmN4vB8kR3tY6uH1sD5fG0j";
  const off: number[] = [];
  const on: number[] = [];
  // The runner's own CPU (it runs in this process; the task's do not count): what the mask costs,
  // whatever the machine's load does to the wall clock.
  const cpu = { off: [] as number[], on: [] as number[] };
  const cpuMs = () => {
    const used = process.cpuUsage();
    return (used.user + used.system) / 1000;
  };
  for (let round = 0; round < 5; round++) {
    // Each side goes first in turn: the second run of a pair pays for the first's garbage.
    for (const side of round % 2 === 0 ? (["off", "on"] as const) : (["on", "off"] as const)) {
      const before = cpuMs();
      const ms = await runTasks(
        { tasks: [{ name: "flood", run: command }] },
        undefined,
        side === "on" ? [value] : [],
      );
      cpu[side].push(cpuMs() - before);
      (side === "on" ? on : off).push(ms);
    }
  }
  const cpuRatio = median(cpu.off.map((ms, i) => ms / (cpu.on[i] as number)));
  const perSecond = (ms: number) => BYTES / 1024 / 1024 / (ms / 1000);
  const ratios = off.map((value, i) => value / (on[i] as number));
  const ratio = median(ratios);
  record(
    {
      name: "stdout_throughput_masked",
      ours: perSecond(median(on)),
      reference: perSecond(median(off)),
      unit: "MiB/s",
      ratio,
      target: ">= 0.9",
      note: `${BYTES / 1024 / 1024} MiB of 100-byte lines through the runner masking one 32-byte value against the runner masking none; median of 5 rounds' ratios; the runner's CPU, unmasked over masked: ${cpuRatio.toFixed(2)}`,
    },
    { ours: on.map(perSecond), reference: off.map(perSecond), ratios },
  );
  const s = spread(ratios);
  console.log(
    `(d) throughput with masking, 100-byte lines: masked median ${perSecond(median(on)).toFixed(0)} MiB/s, unmasked ${perSecond(median(off)).toFixed(0)} MiB/s; ` +
      `median ratio ${ratio.toFixed(2)} of unmasked, p10..p90 ${s.p10.toFixed(2)}..${s.p90.toFixed(2)} (target >= 0.90); ` +
      `the runner's CPU a GiB: masked ${(median(cpu.on) / (BYTES / 2 ** 30)).toFixed(0)} ms, unmasked ${(median(cpu.off) / (BYTES / 2 ** 30)).toFixed(0)} ms, ratio ${cpuRatio.toFixed(2)}`,
  );
}

const SECTIONS: Record<string, () => Promise<void>> = {
  a: killLatency,
  b: perTask,
  c: throughput,
  d: maskedThroughput,
};

/** One whole comparison: each section in a Node process of its own; their results from `file`. */
function runSections(file: string | undefined): void {
  // As the runner runs one Playbook per process: the heap that 1,000 runs and 2,000 spawns leave
  // behind slows the next section's output path by up to a third, which no runner process in a
  // pod ever carries.
  const passed = [
    ...(quick ? ["--quick"] : []),
    ...(["kill-rounds", "tasks", "bytes"] as const).flatMap((name) =>
      flags[name] !== undefined ? [`--${name}=${flags[name]}`] : [],
    ),
  ];
  for (const name of Object.keys(SECTIONS)) {
    const child = spawnSync(
      process.execPath,
      [
        process.argv[1] as string,
        ...passed,
        `--section=${name}`,
        ...(file ? [`--results-file=${file}`] : []),
      ],
      { stdio: "inherit" },
    );
    if (child.status !== 0) process.exit(child.status ?? 1);
  }
}

const section = flags.section;
if (section !== undefined) {
  const measure = SECTIONS[section];
  if (!measure) throw new Error(`--section=${section}: must be one of ${Object.keys(SECTIONS).join(", ")}`);
  await measure();
  load.stop();
} else {
  console.log(
    `runner benchmark: kill rounds ${KILL_ROUNDS} (100-process tree; a third for the smaller), tasks ${TASKS}, output ${BYTES / 1024 / 1024} MiB, ` +
      `${REPEAT} repetition(s); orphans reaped by ${reaper}`,
  );
  load.stop();
  if (REPEAT === 1) runSections(RESULTS_FILE);
  else {
    const dir = mkdtempSync(path.join(tmpdir(), "bench-runner-repeat-"));
    const runs: Comparison[][] = [];
    for (let repetition = 1; repetition <= REPEAT; repetition++) {
      console.log(`repetition ${repetition} of ${REPEAT}`);
      const file = path.join(dir, `${repetition}.jsonl`);
      runSections(file);
      runs.push(
        readFileSync(file, "utf8")
          .split("\n")
          .filter((line) => line !== "")
          .map((line) => ComparisonSchema.parse(JSON.parse(line))),
      );
    }
    rmSync(dir, { recursive: true, force: true });
    const merged = mergeRepeats(runs);
    console.log(`\nratios over ${REPEAT} repetitions (median, p10..p90, each):`);
    for (const c of merged) {
      const s = c.repeats?.spread;
      console.log(
        `  ${c.name.padEnd(32)} ${c.ratio?.toFixed(2) ?? "-"}  ${s ? `${s.p10.toFixed(2)}..${s.p90.toFixed(2)}` : ""}  [${c.repeats?.ratios.map((r) => r.toFixed(2)).join(" ") ?? ""}]  target ${c.target}`,
      );
    }
    if (RESULTS_FILE) for (const c of merged) appendFileSync(RESULTS_FILE, `${JSON.stringify(c)}\n`);
  }
}
